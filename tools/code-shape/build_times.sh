#!/bin/sh
# `cargo build` (the window binary) after an edit to one formats file and after an edit to one
# window file: the two numbers issue 28 asks to record (docs/architecture.md, "Measured shape").
# Each edit adds a public function, so everything that depends on the file rebuilds; the
# file is put back afterwards.  Usage: tools/code-shape/build_times.sh FORMATS_FILE WINDOW_FILE
set -eu
formats_file=${1:-crates/formats/src/card.rs}
window_file=${2:-src/ui/tune/fans.rs}
cargo build -q
for file in "$formats_file" "$window_file"; do
    cp "$file" "$file.shape-probe"
    printf '\npub fn shape_probe_%s() -> u32 {\n    %s\n}\n' "$(date +%s)" "$(date +%N | cut -c1-4)" >>"$file"
    start=$(date +%s.%N)
    cargo build -q
    end=$(date +%s.%N)
    mv "$file.shape-probe" "$file"
    echo "$file: $(echo "$end - $start" | bc) s"
    cargo build -q
done
