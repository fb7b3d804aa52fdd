__version__ = "0.1.0"

# Where editors fetch the JSON Schemas (their "$id"): the files as committed at the moving v1 tag, which
# always points at the newest v1.x.y release (docs/RELEASING.md). A schema change that breaks v1 pipelines
# is a new major tag, so this address stays valid for every pipeline with `version: 1`.
SCHEMA_BASE_URL = "https://raw.githubusercontent.com/edgeconv/edgeconv/v1/edgeconv/schemas/"
