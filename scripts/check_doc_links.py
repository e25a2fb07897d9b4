#!/usr/bin/env python3
"""Checks every relative link in README.md, BENCHMARKS.md and docs/**/*.md: the file (or
folder) it names exists, and its #anchor is a heading of the target page, spelled as GitHub
spells heading anchors. Links to other sites are not fetched. Links inside code (fenced blocks
and `spans`) are not links.

  scripts/check_doc_links.py [ROOT]     (default: the repository this script is in)

Prints each broken link as FILE:LINE: TARGET (why) and exits 1; exits 0 when all resolve.
ctest runs it as docs_links."""
import glob
import os
import re
import sys

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation other than - and _ dropped,
    spaces to hyphens (markup of links and code removed first)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose_lines(path):
    """(line number, text) outside fenced code, with inline code spans blanked."""
    fence = None
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        s = line.lstrip()
        if s.startswith("```") or s.startswith("~~~"):
            mark = s[:3]
            fence = None if fence == mark else (fence or mark)
            continue
        if fence is None:
            yield n, re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)


def heading_anchors(path):
    """Anchors from the raw heading lines (code spans kept as text, as GitHub does)."""
    seen, out, fence = {}, set(), None
    for line in open(path, encoding="utf-8"):
        s = line.lstrip()
        if s.startswith("```") or s.startswith("~~~"):
            fence = None if fence == s[:3] else (fence or s[:3])
            continue
        m = fence is None and re.match(r"(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            a = slug(m.group(2))
            k = seen.get(a, 0)
            seen[a] = k + 1
            out.add(a if k == 0 else f"{a}-{k}")
    return out


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    pages = [os.path.join(root, p) for p in ("README.md", "BENCHMARKS.md")]
    pages += sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    bad, count = [], 0
    for page in pages:
        if not os.path.exists(page):
            continue
        for n, line in prose_lines(page):
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                count += 1
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                where = f"{os.path.relpath(page, root)}:{n}: {target}"
                if not os.path.exists(dest):
                    bad.append(f"{where} (no such file)")
                elif anchor and dest.endswith(".md") and anchor not in heading_anchors(dest):
                    bad.append(f"{where} (no heading #{anchor} in {os.path.relpath(dest, root)})")
    for b in bad:
        print(b)
    print(f"check_doc_links: {len(pages)} pages, {count} relative links, {len(bad)} broken")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
