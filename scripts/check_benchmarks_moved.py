#!/usr/bin/env python3
"""Checks that splitting BENCHMARKS.md into current figures and a dated log lost nothing: every
number of BENCHMARKS.md at REV (the notebook before the split) appears in today's BENCHMARKS.md
or a file under docs/benchmarks/log/, as often as it appeared before at least, and every line
that held a command (an indented or fenced line, or one naming spattn, llama- or scripts/)
appears verbatim in one of them (headings at any level, references to a page at any page).

  scripts/check_benchmarks_moved.py [REV]   (default: 5de2059, the last commit before the split)

Prints what is missing and exits 1, or prints the counts and exits 0."""
import collections
import glob
import os
import re
import subprocess
import sys

NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def numbers(text):
    return collections.Counter(NUMBER.findall(text))


def command_lines(text):
    out, fence = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
            continue
        s = line.strip()
        if s and (fence or line.startswith("    ") or re.search(r"spattn |llama-|scripts/", s)):
            out.append(s)
    return out


def doc_ref(line):
    """The line with its references to a page blanked: the split pointed them at the pages the
    old README and docs/ARCHITECTURE.md became."""
    return re.sub(r"docs/[\w/.-]+\.md|\bREADME\b|\bARCHITECTURE\b", "PAGE", line.strip().lstrip("#").strip())


def main():
    rev = sys.argv[1] if len(sys.argv) > 1 else "5de2059"
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    old = subprocess.run(["git", "-C", root, "show", f"{rev}:BENCHMARKS.md"], check=True,
                         capture_output=True, text=True).stdout
    files = [os.path.join(root, "BENCHMARKS.md")] + sorted(
        glob.glob(os.path.join(root, "docs", "benchmarks", "log", "*.md")))
    new = "\n".join(open(f).read() for f in files)
    have, need = numbers(new), numbers(old)
    short = {n: c - have[n] for n, c in need.items() if have[n] < c}
    # A line is found when it is in the new text as it was, or with its links rewritten for
    # the log's folder (docs/X -> ../../X).
    # Headings count without their level: the log's entries are one level up.
    new_lines = {doc_ref(l) for l in new.split("\n")}
    lost = [l for l in command_lines(old) if doc_ref(l) not in new_lines
            and doc_ref(l.replace("](docs/", "](../../")) not in new_lines]
    for n, c in sorted(short.items()):
        print(f"number {n}: {c} occurrence(s) fewer than before")
    for l in lost:
        print(f"command line lost: {l}")
    total = sum(need.values())
    print(f"{len(files)} files; {total} number occurrences ({len(need)} distinct) in {rev}'s "
          f"BENCHMARKS.md, {sum(short.values())} missing; {len(command_lines(old))} command "
          f"lines, {len(lost)} missing")
    sys.exit(1 if short or lost else 0)


if __name__ == "__main__":
    main()
