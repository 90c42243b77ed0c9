"""The node-local container store is bounded per user (docs/containers.md, "How big the store gets";
docs/security.md, "Shared space is bounded per job"): on the dataplane cluster (store 4Gi, so each user's
share is 2Gi), a user whose images and containers on a node would go past their share has the step refused
before enroot writes, with Warden's message on the step's stderr: at the unpack (enroot create) when the
image is already on the node, at the import when it is not. The worker container keeps running, the node
keeps serving, another user's container step on that node runs meanwhile, and once the user has room again
the same image runs."""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Iterator

import pytest

from tests.support import registry as reg
from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DockerCluster, Exec

IMAGE_OS = 'PRETTY_NAME="Warden test image 1.0"'
REFUSED = "warden: no room for this container on"
#: what carol leaves in her directory of the store: with her image there, past her 2Gi share
FILLER_MIB = 1990


@pytest.fixture(scope="module")
def registry(cluster: DockerCluster) -> Iterator[reg.Registry]:
    with reg.running(cluster) as r:
        yield r


@pytest.fixture(scope="module")
def carol(cluster: DockerCluster, registry: reg.Registry) -> JailUser:
    return JailUser.added_by_root(cluster, f"carol{uuid.uuid4().hex[:4]}")


@pytest.fixture(scope="module")
def dave(cluster: DockerCluster, registry: reg.Registry) -> JailUser:
    return JailUser.added_by_root(cluster, f"dave{uuid.uuid4().hex[:4]}")


def _step(cluster: DockerCluster, user: JailUser, node: str, args: str, command: str) -> Exec:
    return cluster.ssh(
        user.name, f"srun -p cpu -w {node} {args} {command}", check=False, timeout=300, identity=user.identity
    )


def _in_image(cluster: DockerCluster, user: JailUser, node: str, registry: reg.Registry) -> Exec:
    return _step(cluster, user, node, f"--container-image={registry.reference()}", "grep PRETTY_NAME /etc/os-release")


def test_a_user_past_their_share_of_the_store_is_refused_alone(
    cluster: DockerCluster, registry: reg.Registry, carol: JailUser, dave: JailUser
) -> None:
    node = cluster.worker_pods("cpu")[0]
    worker = cluster.inspect(cluster.container(node))
    store = "/var/lib/warden/containers/$(id -u)"
    # an image that fits runs (imported into carol's directory of the node's store)
    fits = _in_image(cluster, carol, node, registry)
    assert fits.ok and IMAGE_OS in fits.out, fits
    # carol's directory (hers, in the store bound into the jail) fills up to past her share, image kept
    fill = _step(
        cluster,
        carol,
        node,
        "",
        f"sh -c {shlex.quote(f'fallocate -l {FILLER_MIB}M {store}/filler && ls {store}/images')}",
    )
    assert fill.ok and ".sqsh" in fill.out, fill

    # the image is on the node: the unpack is refused, saying why, and the step fails
    unpack = _in_image(cluster, carol, node, registry)
    assert not unpack.ok and IMAGE_OS not in unpack.out, unpack
    assert REFUSED in unpack.err and "unpacking the container from the image" in unpack.err, unpack
    assert "spec.containers.store.perUserLimit" in unpack.err and "of your share of 2.0 GiB" in unpack.err, unpack
    # not on the node: the import is refused before a layer is downloaded
    gone = _step(cluster, carol, node, "", f"sh -c {shlex.quote(f'rm -f {store}/images/*.sqsh')}")
    assert gone.ok, gone
    imported = _in_image(cluster, carol, node, registry)
    assert not imported.ok and IMAGE_OS not in imported.out, imported
    assert REFUSED in imported.err and "importing the image (its layers" in imported.err, imported

    # the node goes on: the same worker container, serving; dave's container step there runs
    after = cluster.inspect(cluster.container(node))
    assert (after["Id"], after["State"]["StartedAt"], after["State"]["Running"]) == (
        worker["Id"],
        worker["State"]["StartedAt"],
        True,
    )
    other = _in_image(cluster, dave, node, registry)
    assert other.ok and IMAGE_OS in other.out, other

    # carol makes room: her image runs again (imported anew)
    freed = _step(cluster, carol, node, "", f"sh -c {shlex.quote(f'rm -f {store}/filler')}")
    assert freed.ok, freed
    again = _in_image(cluster, carol, node, registry)
    assert again.ok and IMAGE_OS in again.out, again
