#!/usr/bin/env bash
# Download, into .whl/, the wheels a GPU machine without network needs beyond its own image
# (Python 3.12, x86-64; numpy, cuda-core, torch, cupy, matplotlib, jinja2 are there; its typer is older
# than the one the CLI needs).
# scripts/gpu-session.sh installs whatever lies in .whl/ before running.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl && mkdir -p .whl  # one version of each: pip refuses two
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_39_x86_64 --platform any -d .whl \
  pydantic pydantic-core annotated-types typing-inspection typing-extensions \
  langgraph langgraph-checkpoint langgraph-prebuilt langgraph-sdk langchain langchain-core langchain-openai \
  langchain-protocol langsmith openai distro jiter httpx2 httpcore2 jsonpatch jsonpointer orjson ormsgpack \
  requests-toolbelt sniffio tenacity truststore uuid-utils websockets zstandard xxhash \
  optuna alembic colorlog sqlalchemy mako bm25s \
  kernel-tuner python-constraint2 xmltodict jsonschema jsonschema-specifications referencing rpds-py \
  pymoo autograd cma alive-progress about-time graphemeu deprecated moocore cffi pycparser platformdirs \
  typer rich shellingham annotated-doc markdown-it-py mdurl pygments \
  'nvidia-cuda-crt==13.0.*'  # <mma.h> and the crt headers, matching the image's CUDA 13.0 runtime
ls .whl | wc -l
