"""What the reports of the comparisons with MPI share (scripts/bench-pscw.sh and
scripts/bench-gasnet.sh import it, with scripts/ on PYTHONPATH): the figures of a run, printed
in order, and the fastest of them that match."""
import json


def figures(path, place):
    """Prints the JSON lines of `path`, the measured ones sorted by `place` of their figure,
    then the error lines; returns the measured figures, sorted."""
    rows = [(l.strip(), json.loads(l)) for l in open(path)]
    measured = sorted((tr for tr in rows if "error" not in tr[1]), key=lambda tr: place(tr[1]))
    for text, _ in measured + [tr for tr in rows if "error" in tr[1]]:
        print(text)
    return [r for _, r in measured]


def fastest(figures, bench, ranks, size, mpi, **want):
    """The fastest of `figures` of `bench` at `ranks` and `size`, of gaspi (mpi false) or of
    an MPI, that matches `want`."""
    found = [r for r in figures if (r["bench"], r["ranks"], r["bytes"]) == (bench, ranks, size)
             and (r["lib"] != "gaspi") == mpi and all(r.get(k) == v for k, v in want.items())]
    return min(found, key=lambda r: r["median_us"], default=None)
