# Warden — the entry points everyone uses. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
STAGE := hack/stage.sh
export PY

include hack/Makefile.k8s.mk

.PHONY: help
help: ## this list
	@grep -hE '^[a-zA-Z0-9_.-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  make %-16s %s\n", $$1, $$2}'

# --- Python environment ------------------------------------------------------------------------
$(VENV)/.installed: pyproject.toml dev/pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]' -e ./dev
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## Python virtualenv with the operator, the dev clusters (dev/warden_dev) and test tools

# --- quick loop --------------------------------------------------------------------------------
.PHONY: lint
lint: venv ## ruff + mypy --strict + the import contracts (layers, stdlib-only programs; pyproject.toml) + shellcheck
	$(VENV)/bin/ruff check operator dev tests bench hack
	$(VENV)/bin/ruff format --check operator dev tests bench hack
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	hack/shellcheck.sh

.PHONY: crd
crd: venv ## regenerate the CRD (charts/slurm-operator-crds) and docs/reference.md from the spec model
	$(PY) -m warden.crd --write
	$(PY) -m warden.reference

.PHONY: golden
golden: venv ## regenerate renderer golden files (review the diff!)
	UPDATE_GOLDEN=1 $(PY) -m pytest -q tests/unit/test_render_golden.py

.PHONY: spank
spank: ## build the SPANK jail plugin
	$(MAKE) -C spank

.PHONY: fuzz
fuzz: ## fuzz the plugin's argument parser (FUZZ_SECONDS=30; installs clang + libFuzzer when missing)
	@$(STAGE) install-fuzz-deps hack/install-deps.sh fuzz
	@$(STAGE) fuzz $(MAKE) --no-print-directory -C spank fuzz

# --- test tiers --------------------------------------------------------------------------------
# What the dataplane tier builds (Docker, the base image, both Slurm series, the GPU jail, test images);
# `make tier-builds` builds it too, before the tiers run side by side.
define DATAPLANE_BUILDS
@$(STAGE) docker hack/docker.sh ensure
@$(STAGE) base-image hack/base-image.sh
@$(STAGE) images hack/images.sh
@$(STAGE) images-24.11 env WARDEN_SLURM_SERIES=24.11 hack/images.sh
@$(STAGE) images-gpu hack/images.sh gpu
@$(STAGE) images-test hack/images.sh test
endef

.PHONY: unit integration dataplane gpu-jail conformance e2e e2e-builds nodes nodes-builds tier-builds test
unit: venv ## unit tier: lint, renderers, parsers, plugin helpers, the plugin's C tests (< 1 min)
	@$(STAGE) lint $(MAKE) --no-print-directory lint
	@$(STAGE) unit hack/pytest-tier.sh unit -q
	@$(STAGE) spank-c $(MAKE) --no-print-directory -C spank test-c

integration: venv ## integration tier: the operator against a real kube-apiserver (builds binaries once)
	@$(STAGE) k8s-bins $(MAKE) --no-print-directory k8s-bins
	@$(STAGE) integration hack/pytest-tier.sh integration -q

dataplane: venv ## dataplane tier: real Slurm daemons from the project's images in Docker (and the GPU jail, built once)
	$(DATAPLANE_BUILDS)
	@$(STAGE) dataplane env WARDEN_REQUIRE_GPU_JAIL=1 hack/pytest-tier.sh dataplane -q --durations=15

gpu-jail: venv ## just the GPU jail: build warden/jail-gpu + populate-jail-gpu, check them (also part of `make dataplane`)
	@$(STAGE) docker hack/docker.sh ensure
	@$(STAGE) base-image hack/base-image.sh
	@$(STAGE) images-gpu hack/images.sh spank container-runtime jail gpu
	@$(STAGE) gpu-jail env WARDEN_REQUIRE_GPU_JAIL=1 $(PY) -m pytest tests/dataplane/test_gpu_jail.py -q

conformance: venv ## SchedMD's own test suite (its 24.11.5 release, on the default Slurm) as an ordinary user on a dataplane cluster (docs/conformance.md)
	@$(STAGE) docker hack/docker.sh ensure
	@$(STAGE) base-image hack/base-image.sh
	@$(STAGE) images hack/images.sh
	@$(STAGE) conformance hack/pytest-tier.sh conformance -q

e2e: venv ## e2e tier: helm install on a real single-node Kubernetes (local cluster, or $KUBECONFIG's), its modules in two lanes on it
	@$(STAGE) docker hack/docker.sh ensure
	@$(STAGE) base-image hack/base-image.sh
	@$(STAGE) images hack/images.sh
	@$(STAGE) images-24.11 env WARDEN_SLURM_SERIES=24.11 hack/images.sh
	@$(STAGE) images-test hack/images.sh test
	@$(MAKE) --no-print-directory e2e-builds
	@$(STAGE) e2e hack/e2e-lanes.sh -q --durations=10

nodes: venv nodes-builds ## nodes tier: two VM nodes (Debian's kernel: cgroup v2, AppArmor, NFS) join the local cluster; a SlurmCluster on them shares one NFS jail, then a node dies
	@$(STAGE) docker hack/docker.sh ensure
	@$(STAGE) base-image hack/base-image.sh
	@$(STAGE) images hack/images.sh
	@$(STAGE) nodes hack/pytest-tier.sh nodes -q -s --durations=10

nodes-builds: venv ## what only the nodes tier needs: qemu, nfs-ganesha, the VM nodes' root and image (cached), the cluster binaries
	@$(STAGE) nodes-deps hack/install-deps.sh nodes
	@$(STAGE) vm-image $(PY) -m warden_dev vm-node image
	@$(STAGE) k8s-bins-cluster hack/build-k8s-bins.sh cluster

e2e-builds: venv ## what only the e2e tier needs: CoreDNS and kube-router, the stand-in GPU plugin (the previous release's images build while its lanes run)
	@$(STAGE) k8s-bins-cluster hack/build-k8s-bins.sh cluster
	@$(STAGE) fake-gpu-plugin $(PY) -m warden_dev fake-gpu-plugin

# The Go builds (Kubernetes, CoreDNS, kube-router, the stand-in GPU plugin) beside the Docker builds (the images):
# on a new machine each takes 15-20 minutes, and each waits on downloads and disks as much as on the cores. On a
# machine that has them both lanes take seconds. The previous release's images, which only e2e's upgrade test
# needs, build later, beside e2e's lanes (hack/e2e-lanes.sh), when the cores are half idle.
tier-builds: venv ## what the lanes' tiers need (Kubernetes binaries, images, e2e's builds), built once before they run side by side
	@hack/lanes.sh --builds go-builds docker-builds

.PHONY: go-builds docker-builds
go-builds: venv ## the Go half of tier-builds: Kubernetes binaries, kube-router, the stand-in GPU plugin
	@$(STAGE) k8s-bins $(MAKE) --no-print-directory k8s-bins
	@$(STAGE) kube-router hack/build-k8s-bins.sh kube-router
	@$(STAGE) fake-gpu-plugin $(PY) -m warden_dev fake-gpu-plugin

# CoreDNS is a Go build in the Docker half: on a new machine that evens the halves (images 16 minutes, Kubernetes
# 14, CoreDNS 2.5, kube-router 3); the two halves build different Go projects side by side (hack/build-k8s-bins.sh).
docker-builds: venv ## the Docker half of tier-builds: the images of both Slurm series, GPU and test images; CoreDNS
	$(DATAPLANE_BUILDS)
	@$(STAGE) coredns hack/build-k8s-bins.sh coredns

# Two lanes side by side once everything is built: e2e (the local cluster: its own containerd, kubelet and
# registry; it mostly waits on them, and it is the longest tier, so its modules run in two lanes of their own on
# that one cluster: hack/e2e-lanes.sh) beside the unit, dataplane, integration and
# conformance tiers one after the other (each keeps a core busy: three lanes made the two cores the limit).
# They share nothing but the cores. Their output is prefixed with the lane's first tier.
# Then the nodes tier, alone: its VM nodes run under TCG here, each taking most of a core even idle
# (hack/nodes-in-time.sh runs it unless CI's run would pass its 90 minutes, allowing it 1,500 s or half the
# lanes' time on a slow day: it says so, it never hides it).
# It builds what only it needs (nodes-builds: qemu, nfs-ganesha, the VM image) itself, once, when it runs.
# It runs after a failed lane too (the run's verdict stays failed): one run says how every tier stands.
test: ## every tier, each installing what it needs: e2e beside unit, dataplane, integration and conformance; then nodes
	@$(STAGE) tier-builds $(MAKE) --no-print-directory tier-builds
	@lanes=0; $(STAGE) lanes hack/lanes.sh e2e "unit dataplane integration conformance" || lanes=$$?; \
	hack/nodes-in-time.sh && exit $$lanes

# --- images ------------------------------------------------------------------------------------
.PHONY: docker base-image images images-24.11 images-gpu images-test
docker: ## start Docker Engine (installs Debian's docker.io when missing)
	hack/docker.sh ensure

base-image: docker ## debootstrap debian:trixie-slim and import it into Docker
	hack/base-image.sh

images: base-image ## build every image (warden/<name>:<version>)
	hack/images.sh

images-24.11: base-image ## the Slurm images again on Slurm 24.11 (warden/<name>:<version>-slurm24.11; docs/images.md)
	WARDEN_SLURM_SERIES=24.11 hack/images.sh

images-gpu: base-image ## the GPU jail: warden/jail-gpu, warden/populate-jail-gpu (CUDA, NCCL, all_reduce_perf)
	hack/images.sh spank container-runtime jail gpu

images-test: base-image ## what the test tiers run beside a cluster: warden/test-registry (Debian's docker-registry), warden/test-image, warden/test-ldap (OpenLDAP's slapd)
	hack/images.sh test

# --- registry ----------------------------------------------------------------------------------
.PHONY: push
push: ## push images + charts: REGISTRY=<host[:port]/path> [VERSION=<version>] [NAMES="operator ..."] (docs/install.md)
	@[ -n "$(REGISTRY)" ] || { echo "usage: make push REGISTRY=<host[:port]/path> [VERSION=<version>] [NAMES=...]" >&2; exit 2; }
	hack/build-k8s-bins.sh helm
	$(if $(VERSION),WARDEN_VERSION=$(VERSION) )hack/push.sh $(REGISTRY) $(NAMES)

# --- local cluster -----------------------------------------------------------------------------
.PHONY: up down
up: venv ## local Kubernetes + its registry, images and charts pushed there, a SlurmCluster you can SSH into; NODES=N adds N VM nodes (docs/local-cluster.md)
	WARDEN_VM_NODES=$(NODES) $(PY) -m warden_dev up

down: venv ## tear down what `make up` (or `make controlplane-up`) started, and only that (idempotent)
	$(PY) -m warden_dev down

# --- Helm charts -------------------------------------------------------------------------------
.PHONY: charts-lint
charts-lint: venv ## helm lint --strict every chart; values schema and README tables up to date
	hack/build-k8s-bins.sh helm
	$(PY) hack/gen-values-schema.py --check
	$(PY) hack/gen-chart-docs.py --check
	helm="$$(hack/build-k8s-bins.sh --print-dir)/helm"; \
	 "$$helm" dependency build charts/slurm-operator >/dev/null && \
	 for c in charts/slurm-operator-crds charts/slurm-operator charts/slurm-cluster; do "$$helm" lint --strict "$$c" || exit 1; done && \
	 "$$helm" lint --strict charts/slurm-cluster -f charts/slurm-cluster/examples/gpu-values.yaml

# --- benchmarks --------------------------------------------------------------------------------
.PHONY: bench
bench: venv ## performance figures, printed side by side (never asserted in tests)
	@if compgen -G "bench/*.sh" >/dev/null; then for b in bench/*.sh; do $(STAGE) "$$b" "$$b" || exit 1; done; \
	 else echo "no benchmarks yet"; fi
