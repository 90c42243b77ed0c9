"""The nodes tier shares the e2e tier's cluster fixture: the local cluster (or ``KUBECONFIG``'s), Warden's images
and charts pushed to its registry."""

from tests.e2e.conftest import kube, pytest_runtest_makereport

__all__ = ["kube", "pytest_runtest_makereport"]
