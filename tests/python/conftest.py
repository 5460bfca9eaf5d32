"""Fixtures shared by the pytest suites: a real broker per test, its log on failure."""

import logging

import pytest

from sb_common import open_client
from tidebus_broker import Broker, BrokerError


@pytest.fixture
def broker(request, tmp_path):
    """A fresh broker ($TIDEBUS_BIN) on a free loopback port, stopped with SIGTERM after the test.

    Defaults: `durability = "memory"`, `idle_timeout = "60s"`, `allow_anonymous = true`, queues
    q1..q4 and queue.1, and the emulator's policy (RootManageSharedAccessKey, SAS_KEY_VALUE).
    A test changes them with a marker:

        @pytest.mark.broker(idle_timeout="1s")
        @pytest.mark.broker(queues=["q1", {"name": "q2", "max_delivery_count": 2}])
        @pytest.mark.broker(topics=[{"name": "t1", "subscriptions": ["s1", "s2"]}])
        @pytest.mark.broker(allow_anonymous=False, policies=[{"name": ..., "key": ..., ...}])
    """
    marker = request.node.get_closest_marker("broker")
    settings = dict(marker.kwargs) if marker else {}
    queues = settings.pop("queues", None)
    topics = settings.pop("topics", None)
    policies = settings.pop("policies", None)
    instance = Broker(tmp_path / "broker", settings, queues, topics, policies)
    brokers_of(request.node).append(instance)
    fail_if(instance.start, "broker did not start")
    yield instance
    fail_if(instance.stop, "broker did not stop cleanly")


@pytest.fixture
def client(broker, caplog):
    """An azure-servicebus `ServiceBusClient` on the test's broker; its log is shown on failure.

    A test that restarts its broker (a new port) opens its own clients with
    `sb_common.open_client` instead.
    """
    caplog.set_level(logging.DEBUG, logger="azure.servicebus")
    with open_client(broker) as sb:
        yield sb


def fail_if(action, what):
    """Run `action`; turn a BrokerError into a plain test failure (the log is attached)."""
    try:
        action()
        return
    except BrokerError as error:
        message = f"{what}: {error}"
    pytest.fail(message, pytrace=False)


def brokers_of(item):
    if not hasattr(item, "_tidebus_brokers"):
        item._tidebus_brokers = []
    return item._tidebus_brokers


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach each broker's log to the report of a failed setup, call or teardown."""
    report = yield
    if report.failed:
        for instance in brokers_of(item):
            report.sections.append((f"tidebus log {instance.log_path}", instance.read_log()))
    return report
