#!/usr/bin/python3
"""Checks that the documents' links stay inside the repository and resolve.

  check-docs.py ROOT [FILE.md ...]

Reads README.md and every docs/*.md under ROOT (or the FILEs given, relative to ROOT) and
checks each Markdown link [text](target) outside code: a web address (http, https, mailto)
is left alone; any other target must name a file or folder inside ROOT (a clone has nothing
beside it), and a #fragment must be the anchor of a heading of the file it names (GitHub's
rule: lower case, punctuation dropped, spaces to hyphens, a repeated heading gets -1, -2...).

Prints one 'error: FILE:LINE: ...' line per broken link and exits 1, or prints
'ok N links in M files' and exits 0 (2 on bad usage).
"""
import glob
import os
import re
import sys

LINK_RE = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
WEB_RE = re.compile(r"^(https?|mailto):", re.I)


def strip_code(line):
    """The line without its inline code spans (links there are examples, not links)."""
    return re.sub(r"`[^`]*`", "", line)


def anchors(path, cache={}):
    """The set of heading anchors of a Markdown file, as GitHub makes them."""
    if path in cache:
        return cache[path]
    seen, out, fence = {}, set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fence = not fence
                continue
            m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
            slug = re.sub(r"[^\w\- ]", "", text.lower().replace("`", "")).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else "%s-%d" % (slug, n))
    cache[path] = out
    return out


def check_file(root, rel, errors):
    path = os.path.join(root, rel)
    count, fence = 0, False
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for no, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        for m in LINK_RE.finditer(strip_code(line)):
            target = m.group(1)
            count += 1
            if WEB_RE.match(target):
                continue
            file_part, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                if file_part else path
            where = "%s:%d: link %s" % (rel, no, target)
            if os.path.commonpath([os.path.realpath(dest), root]) != root:
                errors.append("%s points outside the repository" % where)
                continue
            if not os.path.exists(dest):
                errors.append("%s: no such file %s" % (where, os.path.relpath(dest, root)))
                continue
            if frag and dest.endswith(".md") and frag not in anchors(dest):
                errors.append("%s: %s has no heading with anchor #%s"
                              % (where, os.path.relpath(dest, root), frag))
    return count


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.realpath(argv[1])
    files = argv[2:] or (["README.md"] + sorted(
        os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md"))))
    errors, links = [], 0
    for rel in files:
        if not os.path.isfile(os.path.join(root, rel)):
            errors.append("%s: no such file" % rel)
            continue
        links += check_file(root, rel, errors)
    for e in errors:
        print("error: " + e)
    if errors:
        return 1
    print("ok %d links in %d files" % (links, len(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
