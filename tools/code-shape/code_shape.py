#!/usr/bin/env python3
"""The shape numbers issue 28 asks to record (docs/architecture.md, "Measured shape"):
source files over 500 lines, functions over 120 lines, and serde types outside the
formats crate. Reads the checkout it is run in; tests are counted apart from sources.

    python3 tools/code-shape/code_shape.py [--list]
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FN = re.compile(r"^\s*(pub(\([a-z]+\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"C\"\s+)?fn\s+([A-Za-z0-9_]+)")
DERIVE = re.compile(r"#\[derive\(([^)]*)\)\]")


def rust_files():
    for top in ("src", "crates", "tests"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if d not in ("target", "data")]
            for name in filenames:
                if name.endswith(".rs"):
                    path = os.path.join(dirpath, name)
                    yield os.path.relpath(path, ROOT)


def is_test_file(rel):
    return rel.startswith("tests/") or "/tests/" in rel


def strip_strings(line):
    # Braces inside strings and chars must not count; good enough for this code base.
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//")[0]


def long_functions(rel, lines, limit):
    found = []
    i = 0
    while i < len(lines):
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        name = m.group(7)
        depth = 0
        opened = False
        j = i
        while j < len(lines):
            code = strip_strings(lines[j])
            if not opened and ";" in code and "{" not in code:
                break  # a declaration without a body
            depth += code.count("{") - code.count("}")
            if "{" in code:
                opened = True
            if opened and depth <= 0:
                break
            j += 1
        length = j - i + 1
        if opened and length > limit:
            found.append((length, rel, name))
        i += 1  # nested functions are measured too
    return found


def serde_style(lines, idx):
    """(tagging form, casing) of the serde type whose derive is on line idx; None for a
    struct without a renaming (a struct has no tag, and its fields are written as named)."""
    attrs = []
    j = idx + 1
    while j < len(lines) and not re.search(r"\b(struct|enum)\s", lines[j]):
        attrs.append(lines[j])
        j += 1
    if j >= len(lines):
        return None
    text = " ".join(attrs)
    casing = re.search(r'rename_all\s*=\s*"([^"]+)"', text)
    casing = casing.group(1) if casing else "as written"
    if "enum" not in lines[j]:
        return ("struct", casing)
    if "untagged" in text:
        form = "untagged"
    elif re.search(r'tag\s*=\s*"([^"]+)"', text):
        tag = re.search(r'tag\s*=\s*"([^"]+)"', text).group(1)
        content = re.search(r'content\s*=\s*"([^"]+)"', text)
        form = f"tag={tag}" + (f",content={content.group(1)}" if content else "")
    elif "transparent" in text:
        form = "transparent"
    else:
        form = "external"
    return (form, casing)


def main():
    listing = "--list" in sys.argv
    big_src, big_test, long_src, long_test = [], [], [], []
    serde_outside, serde_inside = [], 0
    tag_forms, casings = {}, {}
    for rel in sorted(rust_files()):
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            lines = f.read().split("\n")
        count = len(lines) - 1 if lines and lines[-1] == "" else len(lines)
        test = is_test_file(rel)
        if count > 500:
            (big_test if test else big_src).append((count, rel))
        (long_test if test else long_src).extend(long_functions(rel, lines, 120))
        if test:
            continue
        in_formats = rel.startswith("crates/formats/") or "/src/formats/" in rel
        in_test_mod = False
        for idx, line in enumerate(lines):
            if re.match(r"\s*mod tests\s*\{", line):
                in_test_mod = True  # unit-test modules sit at the end of a file
            m = DERIVE.search(line)
            if m and not in_test_mod and ("Serialize" in m.group(1) or "Deserialize" in m.group(1)):
                if in_formats:
                    serde_inside += 1
                else:
                    after = " ".join(lines[idx + 1: idx + 6])
                    name = re.search(r"(struct|enum)\s+([A-Za-z0-9_]+)", after)
                    serde_outside.append((rel, name.group(2) if name else "?"))
            if m and not in_test_mod and ("Serialize" in m.group(1) or "Deserialize" in m.group(1)):
                style = serde_style(lines, idx)
                if style:
                    tag_forms.setdefault(style[0], 0)
                    tag_forms[style[0]] += 1
                    casings.setdefault(style[1], 0)
                    casings[style[1]] += 1
    print(f"source files over 500 lines: {len(big_src)}")
    print(f"test files over 500 lines:   {len(big_test)}")
    print(f"source functions over 120 lines: {len(long_src)}")
    print(f"test functions over 120 lines:   {len(long_test)}")
    print(f"serde types in the formats room: {serde_inside}")
    print(f"serde types outside it:          {len(serde_outside)}")
    enum_forms = {k: v for k, v in tag_forms.items() if k != "struct"}
    print(f"enum tagging forms: {len(enum_forms)} " + ", ".join(f"{k} {v}" for k, v in sorted(enum_forms.items())))
    print(f"name casings: {len(casings)} " + ", ".join(f"{k} {v}" for k, v in sorted(casings.items())))
    if listing:
        for n, rel in sorted(big_src, reverse=True):
            print(f"  file {n:5} {rel}")
        for n, rel, name in sorted(long_src, reverse=True):
            print(f"  fn   {n:5} {rel} {name}")
        for rel, name in serde_outside:
            print(f"  serde {rel} {name}")


if __name__ == "__main__":
    main()
