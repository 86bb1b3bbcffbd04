#!/usr/bin/env bash
# The device tool sends the working tree (tracked and untracked files, at most 64 MiB); the archives under
# results/ (each headline call's raw runs, about 90 MB in all) are not needed on a lent machine. Move them out of
# the tree before a call and back after it:
#   bash scripts/device/slim_tree.sh out    # every tracked file under results/ of at least $MIN_BYTES (1 MB)
#   bash scripts/device/slim_tree.sh back   # puts them back; refuses to overwrite a file that is there again
#   bash scripts/device/slim_tree.sh size   # what the tree would send now, in MB (tracked + untracked)
# The files go to $STASH (default /tmp/pods-slim-tree) with a manifest of their paths; `out` refuses to run
# while a manifest is there (a stash not yet put back), so nothing is moved twice.
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
STASH=${STASH:-/tmp/pods-slim-tree}; MIN_BYTES=${MIN_BYTES:-1000000}; M=$STASH/manifest

size() {  # bytes of what the device tool would copy: tracked files present + untracked files not ignored
  { git ls-files -z; git ls-files -z -o --exclude-standard; } | xargs -0 stat -c %s 2>/dev/null \
    | awk '{s += $1} END {printf "%.1f MB\n", s / 1e6}'
}

case ${1:-} in
  out)
    [ ! -e "$M" ] || { echo "slim_tree: $M exists: put the last stash back first (slim_tree.sh back)" >&2; exit 1; }
    mkdir -p "$STASH"; : > "$M.tmp"
    while IFS= read -r -d '' f; do
      [ -f "$f" ] && [ "$(stat -c %s "$f")" -ge "$MIN_BYTES" ] && printf '%s\n' "$f" >> "$M.tmp"
    done < <(git ls-files -z results)
    mv "$M.tmp" "$M"  # the manifest first: an interrupted move is still put back by `back`
    while IFS= read -r f; do mkdir -p "$STASH/files/$(dirname "$f")"; mv "$f" "$STASH/files/$f"; done < "$M"
    echo "slim_tree: moved $(wc -l < "$M") files to $STASH; the tree now sends $(size)" ;;
  back)
    [ -e "$M" ] || { echo "slim_tree: nothing to put back ($M not found)" >&2; exit 1; }
    while IFS= read -r f; do
      if [ -e "$STASH/files/$f" ]; then
        [ ! -e "$f" ] || { echo "slim_tree: $f is in the tree again; not overwritten (stash: $STASH/files/$f)" >&2; exit 1; }
        mkdir -p "$(dirname "$f")"; mv "$STASH/files/$f" "$f"
      fi
    done < "$M"
    rm -f "$M"; echo "slim_tree: put back; the tree sends $(size)" ;;
  size) size ;;
  *) echo "usage: slim_tree.sh out|back|size" >&2; exit 2 ;;
esac
