#!/usr/bin/env bash
# One frozen code tree for a registered study's calls (issue 60, item 4): an archive of one commit, not the
# working tree of the day, so that code changed on main between calls never reaches them.
#   bash scripts/device/frozen_tree.sh <commit>    # here: .frozen/ (git-ignored) = that commit's runnable files
#   # device call, carry [".whl", ".frozen"]:
#   cd .frozen && bash scripts/device/frozen_tree.sh check && bash scripts/device/headline_v5.sh confirm --seeds A-B
# `check` (run inside the tree on the device) prints, and writes to $OUT/tree.txt, the commit the archive was made
# from and the sha1 of pods/'s Python sources (the digest greso_v1.sh prints), and links the carried wheels.
set -euo pipefail
case ${1:?give a commit, or check} in
  check)
    [ -f FROZEN_COMMIT ] || { echo "frozen_tree: no FROZEN_COMMIT here: run inside .frozen/" >&2; exit 1; }
    [ -e .whl ] || ln -sfn ../.whl .whl
    # the shipped policy from the checkout beside it, only where its blobs are the frozen commit's
    if [ ! -d pods/assets/headline ]; then
      cp -r ../pods/assets/headline pods/assets/headline
      while read -r _ _ blob path; do
        [ "$(python3 -c 'import hashlib, sys; d = open(sys.argv[1], "rb").read()
print(hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest())' "$path")" = "$blob" ] || { echo "frozen_tree: $path differs from the frozen commit's" >&2; exit 1; }
      done < POLICY_TREE
    fi
    digest=$(find pods -name '*.py' -type f | LC_ALL=C sort | xargs cat | sha1sum | cut -c1-12)
    line="frozen tree: commit $(cat FROZEN_COMMIT); pods/ sources sha1 $digest"
    echo "$line"; [ -z "${OUT:-}" ] || echo "$line" > "$OUT/tree.txt" ;;
  *)
    cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
    commit=$(git rev-parse --verify "$1^{commit}")
    rm -rf .frozen && mkdir .frozen
    # what the study scripts run: the package, its configs, the scripts, the data and the frozen settings
    # (not the shipped policy's 21 MB, which the device's checkout sends anyway: `check` takes it from there and
    # the study scripts check its sha256 on every call, so the tree fits the 64 MiB a call may send)
    git archive "$commit" pods conf scripts data pyproject.toml ':(exclude)pods/assets/headline' \
      $(git ls-tree -r --name-only "$commit" results | grep -E '/frozen\.env$') | tar -x -C .frozen
    git ls-tree "$commit" pods/assets/headline/ > .frozen/POLICY_TREE  # the policy's blobs at that commit
    echo "$commit" > .frozen/FROZEN_COMMIT
    echo "frozen_tree: .frozen/ holds $commit ($(du -sh .frozen | cut -f1))" ;;
esac
