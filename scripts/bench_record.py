"""What an edgeconv record costs against a frozen dataclass: making the class, and making an instance.

    python scripts/bench_record.py [--classes 200] [--repeat 5]

Making classes: fresh interpreters make ``--classes`` classes of four fields each way, taking turns (the
fastest of ``--repeat``), as ``edgeconv check``'s imports make its 23. Making instances: one class of six
fields (the last with a default), called with all six by position and with five (the default used), by the
record's ``__init__``, by the dataclass ``__init__`` it compiles for other calls, and by a frozen dataclass
(best of ``--repeat`` timeit runs of 200,000 calls).
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import timeit
from typing import Any

MAKE = ("import dataclasses, time\nfrom edgeconv._record import record\n"
        "deco = record if {mine} else dataclasses.dataclass(frozen=True)\nstart = time.perf_counter()\n"
        "for i in range({n}):\n"
        "    deco(type(f'C{{i}}', (), {{'__doc__': 'x', '__annotations__': {{'a': 'int', 'b': 'str', "
        "'c': 'float', 'd': 'tuple'}}, 'd': ()}}))\nprint(time.perf_counter() - start)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classes", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.repeat):
        for mine in (True, False):
            out = subprocess.run([sys.executable, "-c", MAKE.format(mine=mine, n=args.classes)], check=True,
                                 capture_output=True, text=True).stdout
            times[mine].append(float(out))
    record_s, dataclass_s = min(times[True]), min(times[False])
    print(f"making {args.classes} classes of four fields: record {record_s * 1e3:.1f} ms "
          f"({record_s / args.classes * 1e3:.3f} ms a class), frozen dataclass {dataclass_s * 1e3:.1f} ms "
          f"({dataclass_s / args.classes * 1e3:.3f} ms a class): {record_s / dataclass_s:.2f}x")

    from edgeconv import _record

    def six_fields(deco: Any) -> Any:
        class Six:
            a: int
            b: int
            c: int
            d: int
            e: int
            f: int = 0

        return deco(Six)

    Mine, Theirs = six_fields(_record.record), six_fields(dataclasses.dataclass(frozen=True))

    class Compiled:
        pass

    Compiled.__init__ = _record._compiled_init(Mine, list(dataclasses.fields(Mine)))  # type: ignore[misc]
    for name, cls in (("record", Mine), ("its compiled __init__", Compiled), ("frozen dataclass", Theirs)):
        six, five = (min(timeit.repeat(lambda c=cls, v=values: c(*v), number=200_000, repeat=args.repeat)) / 0.2
                     for values in ((1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 5)))
        print(f"an instance, {name}: {six:.2f} us (six fields given), {five:.2f} us (the default used)")


if __name__ == "__main__":
    main()
