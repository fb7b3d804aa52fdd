"""Model loaders, TFLite export and the TF-free .tflite reader.

Only ``tflite_reader`` is imported eagerly; the loaders and the exporter import
TensorFlow and are imported by the build stages that need them.
"""
