"""A registry beside a Docker dataplane cluster, for container jobs (docs/containers.md): Debian's
docker-registry (warden/test-registry, built by `hack/images.sh test`) on the cluster's network, seeded
with warden/test-image, an image of its own OS release and a marker file.

Two registry containers share one storage volume: ``registry:5000`` answers anyone (the seed is pushed to
it from this host through a loopback port), ``private-registry:5000`` only ``USER`` with ``PASSWORD``.
Both speak plain HTTP: the cluster's spec.containers.allowHttpRegistries lets enroot talk to them.
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from warden_dev.dockercluster import DockerCluster, DockerError, docker, missing_images, version

#: what jobs name (enroot's REGISTRY#IMAGE:TAG form, as `srun --container-image` takes it)
IMAGE_PATH = "warden-test/image"
TAG = "1.0"
USER = "ci-robot"
PASSWORD = "s3cret-pull-token"


class Registry:
    def __init__(self, cluster: DockerCluster) -> None:
        self.cluster = cluster
        self.volume = f"{cluster.prefix}-registry-data"
        self.open = f"{cluster.prefix}-registry"
        self.private = f"{cluster.prefix}-private-registry"
        self.image = f"warden/test-registry:{version()}"
        self.seed = f"warden/test-image:{version()}"

    def reference(self, private: bool = False, image: str = IMAGE_PATH, tag: str = TAG, sep: str = "#") -> str:
        """``registry:5000#warden-test/image:1.0``: what a user passes to --container-image; with
        ``sep="/"`` the form a `#SBATCH` line needs (sbatch reads a `#` there as a comment's start)."""
        return f"{'private-registry' if private else 'registry'}:5000{sep}{image}:{tag}"

    def start(self) -> None:
        labels = self.cluster.labels_args("registry")
        docker("volume", "create", *labels, self.volume)
        common = ["--network", self.cluster.network, "-v", f"{self.volume}:/var/lib/docker-registry", *labels]
        docker("run", "-d", "--name", self.open, "--network-alias", "registry", "-p", "127.0.0.1::5000",
               *common, self.image)  # fmt: skip
        docker("run", "-d", "--name", self.private, "--network-alias", "private-registry",
               "-e", f"REGISTRY_USER={USER}", "-e", f"REGISTRY_PASSWORD={PASSWORD}", *common, self.image)  # fmt: skip
        port = docker("port", self.open, "5000/tcp").stdout.strip().splitlines()[0].rsplit(":", 1)[1]
        self._wait_listening(int(port))
        # docker treats registries on 127.0.0.0/8 as plain HTTP ones: no daemon configuration needed
        pushed = f"127.0.0.1:{port}/{IMAGE_PATH}:{TAG}"
        docker("tag", self.seed, pushed)
        try:
            docker("push", pushed, timeout=300)
        finally:
            docker("rmi", pushed, check=False)

    def stop(self) -> None:
        docker("rm", "-fv", self.open, self.private, check=False, timeout=120)
        docker("volume", "rm", "-f", self.volume, check=False)

    @staticmethod
    def _wait_listening(port: int, timeout: float = 60) -> None:
        """Until the registry answers its API's version check (docker's port proxy listens before it)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError as e:
                if time.monotonic() > deadline:
                    raise DockerError(f"the test registry does not answer on 127.0.0.1:{port}: {e}") from e
            time.sleep(0.5)


@contextmanager
def running(cluster: DockerCluster) -> Iterator[Registry]:
    """The test registry beside ``cluster``, seeded, for the length of the ``with``: the dataplane modules'
    ``registry`` fixture. Fails the test, naming the images, when they are not built."""
    r = Registry(cluster)
    missing = missing_images([r.image, r.seed])
    if missing:
        pytest.fail(f"images missing: {', '.join(missing)} (hack/images.sh test)", pytrace=False)
    r.start()
    try:
        yield r
    finally:
        r.stop()


def seeded_image() -> str:
    """``warden/test-registry-seeded:<id>``: the test registry with warden/test-image already in its
    storage, for clusters this host's Docker cannot push into (the e2e tier's Kubernetes). Made once per
    build of the two images (``<id>``: both image IDs, shortened) by running the registry here, pushing
    the image to it and committing the container."""
    ids = [docker("image", "inspect", "-f", "{{.Id}}", f"warden/{n}:{version()}").stdout.strip()[7:19]
           for n in ("test-registry", "test-image")]  # fmt: skip
    seeded = f"warden/test-registry-seeded:{'-'.join(ids)}"
    if docker("image", "inspect", seeded, check=False).returncode == 0:
        return seeded
    name = f"warden-registry-seed-{os.getpid()}"
    docker("run", "-d", "--name", name, "-p", "127.0.0.1::5000", f"warden/test-registry:{version()}")
    try:
        port = docker("port", name, "5000/tcp").stdout.strip().splitlines()[0].rsplit(":", 1)[1]
        Registry._wait_listening(int(port))
        pushed = f"127.0.0.1:{port}/{IMAGE_PATH}:{TAG}"
        docker("tag", f"warden/test-image:{version()}", pushed)
        try:
            docker("push", pushed, timeout=300)
        finally:
            docker("rmi", pushed, check=False)
        docker("commit", name, seeded)
    finally:
        docker("rm", "-f", name, check=False)
    return seeded
