# vLLM's router (vllm-project/router, the `vllm-router` wheel) for deploy/k8s/router.yaml.
#   docker build -f deploy/router.Dockerfile -t vllm-router deploy
FROM python:3.12-slim
ARG VLLM_ROUTER_VERSION=0.1.17
RUN python3 -m pip install --no-cache-dir "vllm-router==${VLLM_ROUTER_VERSION}"
EXPOSE 8000 29000
ENTRYPOINT ["vllm-router"]
