#!/usr/bin/env bash
# Fails, naming them, when git tracks compiled programs or objects: build output belongs in bin/,
# build/ or cdk.out/ (git-ignored), never in the repository. `make test` (and so CI) runs it.
#
# The rule is the file's content, not its mode: a file is build output when it starts with the magic
# number of an executable or object format (ELF; Mach-O, thin or universal; PE/COFF, that is "MZ"
# with "PE\0\0" where its header points; WebAssembly; ar archives such as Go's .a). Scripts meant to
# be run (scripts/*.sh, .ci/run) are text and pass whatever their mode.
#
# It also checks that .gitignore covers what `go build` writes without -o for every main package.
#
#   scripts/no-build-output.sh        check every file git tracks (in the index), from the root
set -euo pipefail
cd "$(dirname "$0")/.."

# magic prints the first n bytes of a file as lower-case hex, no spaces (od reads no more than n).
magic() { od -An -tx1 -N"$2" -- "$1" 2>/dev/null | tr -d ' \n'; }

# is_pe tells whether a file starting with "MZ" is a PE image: the 32-bit little-endian offset at
# 0x3c points at the signature "PE\0\0".
is_pe() {
  local off
  off="$(od -An -tu4 -j60 -N4 -- "$1" 2>/dev/null | tr -d ' \n')"
  [ -n "$off" ] && [ "$(od -An -tx1 -j"$off" -N4 -- "$1" 2>/dev/null | tr -d ' \n')" = 50450000 ]
}

found=()
while IFS= read -r -d '' f; do
  [ -f "$f" ] && [ ! -L "$f" ] || continue # a symlink, or deleted in the work tree: nothing to read
  m="$(magic "$f" 8)"
  case "$m" in
    7f454c46*) what="ELF executable or object" ;;
    feedface* | feedfacf* | cefaedfe* | cffaedfe*) what="Mach-O executable or object" ;;
    cafebabe*) what="Mach-O universal binary (or Java class)" ;;
    0061736d*) what="WebAssembly module" ;;
    213c617263683e0a) what="ar archive (static library)" ;;
    4d5a*) if is_pe "$f"; then what="PE executable (Windows)"; else continue; fi ;;
    *) continue ;;
  esac
  found+=("$f ($what, $(wc -c <"$f" | tr -d ' ') bytes)")
done < <(git ls-files -z)

# And .gitignore must cover where a build without -o writes: `go build ./cmd/x` at the root writes x
# there, `go build` inside cmd/x writes cmd/x/x.
missing=()
if command -v go >/dev/null 2>&1; then
  mains="$(go list -f '{{if eq .Name "main"}}{{.Dir}}{{end}}' ./...)"
  while IFS= read -r dir; do
    [ -n "$dir" ] || continue
    dir="${dir#"$PWD"/}"
    for out in "${dir##*/}" "$dir/${dir##*/}"; do
      git check-ignore -q --no-index -- "$out" || missing+=("$out")
    done
  done <<<"$mains"
fi

if [ "${#missing[@]}" -gt 0 ]; then
  echo "no-build-output: .gitignore does not cover where these builds write; add them:" >&2
  printf '  /%s\n' "${missing[@]}" >&2
fi
if [ "${#found[@]}" -gt 0 ]; then
  echo "no-build-output: git tracks build output; git rm it (builds write to bin/, build/, cdk.out/):" >&2
  printf '  %s\n' "${found[@]}" >&2
fi
[ "${#found[@]}" -eq 0 ] && [ "${#missing[@]}" -eq 0 ] || exit 1
echo "no-build-output: no executable or object file is tracked"
