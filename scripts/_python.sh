# shellcheck shell=bash
# Sourced by the scripts in this folder: find Python >= 3.12, create or reuse the
# virtualenv, install django-workers into it (editable, with the dev tools).
#
# Afterwards the current directory is the repository root, $VENV is the
# virtualenv's absolute path, $VENV_PYTHON its interpreter, and $VENV/bin is
# first on PATH.
#
# Environment:
#   PYTHON  the interpreter to build the virtualenv with (must be 3.12 or newer)
#   VENV    where the virtualenv lives (default: .venv in the repository root)
#
# Without PYTHON, it runs python3.13, python3.12 and python3 in turn and takes
# the first that really is 3.12+ (pyenv shims on the PATH fail unless pyenv
# selects them), then asks pyenv for its newest installed 3.12+.

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$REPO_ROOT" || exit 1

workers_say() {
  printf '[%s] %s\n' "${0##*/}" "$*" >&2
}

workers_die() {
  workers_say "error: $*"
  exit 1
}

# Run "$@" with a time limit, where the timeout command exists (not on stock macOS).
workers_timeout() {
  local seconds=$1
  shift
  if command -v timeout >/dev/null 2>&1; then
    timeout --foreground "$seconds" "$@"
  else
    "$@"
  fi
}

workers_python_ok() {
  workers_timeout 30 "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1
}

workers_python_version() {
  workers_timeout 30 "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null
}

workers_pyenv() {
  if command -v pyenv >/dev/null 2>&1; then
    command -v pyenv
  elif [[ -x "${PYENV_ROOT:-$HOME/.pyenv}/bin/pyenv" ]]; then
    printf '%s\n' "${PYENV_ROOT:-$HOME/.pyenv}/bin/pyenv"
  else
    return 1
  fi
}

# Print the interpreter to build the virtualenv with, or explain and fail.
workers_find_python() {
  local cmd version pyenv prefix tried=()
  if [[ -n "${PYTHON:-}" ]]; then
    if workers_python_ok "$PYTHON"; then
      printf '%s\n' "$PYTHON"
      return 0
    fi
    version="$(workers_python_version "$PYTHON")" || version=""
    workers_say "error: PYTHON=$PYTHON is ${version:-not a working Python}; django-workers needs Python 3.12 or newer (Django 6.0 does)."
    [[ -n "$version" ]] ||
      workers_say "(A pyenv shim runs only when pyenv selects its version, e.g. PYENV_VERSION=3.12.1.)"
    workers_say "Set PYTHON to a Python 3.12+ interpreter, or unset it to search automatically."
    return 1
  fi
  for cmd in python3.13 python3.12 python3; do
    if workers_python_ok "$cmd"; then
      printf '%s\n' "$cmd"
      return 0
    fi
    version="$(workers_python_version "$cmd")" || version=""
    tried+=("$cmd (${version:-not runnable})")
  done
  if pyenv="$(workers_pyenv)"; then
    # Newest first; skip virtualenvs, "system" and non-CPython names.
    for version in $("$pyenv" versions --bare 2>/dev/null |
      grep -E '^[0-9]+\.[0-9]+(\.[0-9]+)?$' | sort -t. -k1,1nr -k2,2nr -k3,3nr); do
      prefix="$("$pyenv" prefix "$version" 2>/dev/null)" || continue
      if workers_python_ok "$prefix/bin/python"; then
        printf '%s\n' "$prefix/bin/python"
        return 0
      fi
    done
    tried+=("pyenv (no installed 3.12+)")
  else
    tried+=("pyenv (not installed)")
  fi
  workers_say "error: no Python 3.12 or newer found; django-workers needs it (Django 6.0 does)."
  workers_say "Tried: $(printf '%s, ' "${tried[@]}" | sed 's/, $//')."
  workers_say "Install Python 3.12+ (e.g. 'pyenv install 3.12', your OS packages, or python.org),"
  workers_say "or set PYTHON=/path/to/python3.12 and run this again."
  return 1
}

# Create the virtualenv at $VENV, or reuse it when its Python is 3.12+ (and is
# the one PYTHON asks for, when set).
workers_venv() {
  local python wanted have=""
  if [[ -n "${PYTHON:-}" ]]; then
    python="$(workers_find_python)" || exit 1
  fi
  if [[ -x "$VENV/bin/python" ]] && workers_python_ok "$VENV/bin/python"; then
    [[ -z "${PYTHON:-}" ]] && return 0
    wanted="$(workers_python_version "$python")"
    have="$(workers_python_version "$VENV/bin/python")"
    [[ "$wanted" == "$have" ]] && return 0
    workers_say "$VENV has Python $have but PYTHON=$PYTHON is $wanted: recreating it."
  fi
  if [[ -e "$VENV" ]]; then
    [[ -f "$VENV/pyvenv.cfg" ]] ||
      workers_die "$VENV exists but is not a virtualenv; move it away or set VENV to another path."
    [[ -n "${have:-}" ]] || workers_say "$VENV has no working Python 3.12+: recreating it."
    rm -rf "$VENV"
  fi
  [[ -n "${python:-}" ]] || python="$(workers_find_python)" || exit 1
  workers_say "creating virtualenv $VENV with $python (Python $(workers_python_version "$python"))"
  "$python" -m venv "$VENV" || workers_die "could not create the virtualenv at $VENV with $python."
}

# pip install -e .[dev], only when pyproject.toml changed since the last
# install. PyMySQL (the mysql extra) is pure Python and lets the suite run on
# MariaDB/MySQL.
workers_install() {
  local extras="dev" stamp="$VENV/.django-workers-install" want
  want="$("$VENV_PYTHON" -c 'import hashlib, sys
print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' pyproject.toml) [$extras]" ||
    workers_die "could not read pyproject.toml in $REPO_ROOT."
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  workers_say "installing django-workers-db[$extras] into $VENV (editable) ..."
  PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$VENV_PYTHON" -m pip install --quiet --editable ".[$extras]" ||
    workers_die "pip install failed (see above); fix it and run this again."
  printf '%s\n' "$want" >"$stamp"
}

# Exit 0 when the database at URL $1 answers within 5 seconds; else print why.
workers_db_ready() {
  workers_timeout 20 "$VENV_PYTHON" "$REPO_ROOT/scripts/_db_ready.py" "$1" 5
}

# The URL with any password replaced by ***, for messages.
workers_redact() {
  printf '%s\n' "$1" | sed -E 's#(//[^:/@]*):[^@/]*@#\1:***@#'
}

VENV="${VENV:-.venv}"
[[ "$VENV" == /* ]] || VENV="$REPO_ROOT/$VENV"
workers_venv
VENV_PYTHON="$VENV/bin/python"
workers_install
export VIRTUAL_ENV="$VENV"
export PATH="$VENV/bin:$PATH"
unset PYTHONHOME
