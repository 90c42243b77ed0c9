# Upstream Kubernetes binaries and a throwaway control plane (include from the top-level Makefile).
#   make k8s-bins                 # etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
#                                 # kubelet, kube-proxy, kwok, helm -> ~/.cache/warden/bin/<k8s version>/
#   make k8s-bins K8S_BINS=controlplane   # all but kubelet and kube-proxy
#   make controlplane-up / controlplane-down   # python -m warden_dev controlplane up|down (dev/warden_dev)
K8S_BINS ?= all

.PHONY: k8s-bins controlplane-up controlplane-down
k8s-bins:
	hack/build-k8s-bins.sh $(K8S_BINS)

controlplane-up: k8s-bins venv
	$(PY) -m warden_dev controlplane up

controlplane-down: venv
	$(PY) -m warden_dev controlplane down
