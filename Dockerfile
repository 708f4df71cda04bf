# syntax=docker/dockerfile:1
# The mpijob-operator image: `make image` (docker build -t mpijob-operator:dev .).
# Stage 1 builds wheels of the project and its dependencies; stage 2 installs them into a clean
# virtualenv on the slim base, and runs as the non-root uid 65532 the Deployment expects
# (manifests/operator/deployment.yaml: runAsNonRoot, readOnlyRootFilesystem, /tmp an emptyDir).
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md* ./
COPY controller/ controller/
COPY client/ client/
COPY informers/ informers/
COPY reconcilers/ reconcilers/
COPY testsupport/ testsupport/
RUN pip wheel --wheel-dir /wheels .

FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH HOME=/tmp
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --find-links=/wheels mpijob-operator \
 && python -m compileall -q /opt/venv
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["mpijob-operator"]
