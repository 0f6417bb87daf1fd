# Sourced by the GPU checks: the GPU machine's image lacks simpy and pydantic (fetch.sh
# downloads them into .gpu/wheels here); install them beside the checkout on PYTHONPATH.
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
if [ -d .gpu/wheels ] && ! python3 -c "import simpy, pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu/wheels/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD"
fi
