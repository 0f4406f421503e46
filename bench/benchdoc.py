"""Shared by the benchmark reports: replacing a generated section of docs/benchmarks.md."""

import os


def replace_section(path, start, end, text, heading):
    """Writes `text` between the `start` and `end` marker lines of `path` (atomically),
    appending it under `heading` if the markers are not there yet."""
    section = f"{start}\n{text}\n{end}\n"
    doc = open(path).read() if os.path.exists(path) else "# Benchmarks\n\n"
    if start in doc and end in doc:
        head, rest = doc.split(start, 1)
        tail = rest.split(end, 1)[1].lstrip("\n")
        doc = head + section + (("\n" + tail) if tail else "")
    else:
        doc = doc.rstrip("\n") + f"\n\n{heading}\n\n" + section
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(doc)
    os.replace(path + ".tmp", path)
