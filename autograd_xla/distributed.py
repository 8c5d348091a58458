"""Several processes, one job: `initialize` joins this process to the others, so that pmap
runs over the CPU devices of all of them.

It does what jax.distributed.initialize does for the CPU, with jaxlib's own pieces
(shared/notes/parallel-and-cache.md (c)): process 0 runs XLA's coordination service at
`coordinator_address`; every process connects a client to it (the service gives each the
others' devices, a key-value store and barriers); XLA's CPU collectives between processes go
over gloo's TCP transport; and the CPU backend's client is made over that client
(backend.set_cpu_client_options), so its devices are all processes' devices, a process's own
being `local_devices()`. Global device ids are not dense (2 processes x 2 devices: 0, 1, 2048,
2049); code goes by the order of `autograd_xla.devices()`.

pmap then maps over the devices of every process: each process passes the shards of its own
devices (a leading axis of its local device count) and gets back their results, as in jax.
Every process compiles the same program (same text, same global device assignment; measured
equal fingerprints), which needs no round trip through the coordinator.

The job is fail-stop. When a process dies, a collective the others are in, or enter, fails
at once (gloo sees the connection close); pmap raises errors.ProcessLostError. About
`heartbeat_timeout` seconds later the coordination service notices the missing heartbeats
and terminates the surviving processes (SIGABRT, "Terminating process because the JAX
distributed service detected fatal errors"). A process that is alive but never enters a
collective is not detected: the others wait for it.
"""
import atexit
import threading

from . import backend
from .clients import jaxlib_ext as _jax
from .clients import xc

_LOOPBACK = ("127.", "localhost", "[::1]", "::1")


class _Job:
    """This process's part of the job: the service (process 0 only) and its client."""

    __slots__ = ("address", "num_processes", "process_id", "service", "client")

    def __init__(self, address, num_processes, process_id, service, client):
        self.address, self.num_processes, self.process_id = address, num_processes, process_id
        self.service, self.client = service, client


_job = None
_lock = threading.Lock()


def initialize(coordinator_address, num_processes, process_id, local_device_count=None, heartbeat_timeout=10,
               init_timeout=60, shutdown_timeout=10, hostname=None, interface=None):
    """Join the job of `num_processes` processes whose coordinator (process 0, which starts it)
    listens at `coordinator_address` ("host:port"); this is process `process_id`. Call it in
    every process before anything runs on the CPU (the CPU client is made over the job).
    `local_device_count`: this process's CPU devices (default: set_cpu_device_count's choice,
    else $AUTOGRAD_XLA_CPU_DEVICES, else 1); every process should have the same number.
    Timeouts in seconds: `init_timeout` to wait for all processes to connect;
    `heartbeat_timeout` until a silent process counts as dead (the survivors are then
    terminated: the job is fail-stop); `shutdown_timeout` for shutdown's barrier. The runtime
    terminates (SIGABRT) a process that cannot join within `init_timeout` too (measured: the
    client's connect does not return an error, it aborts), so launch all processes together.
    `hostname` / `interface`: where gloo listens for the other processes (default: 127.0.0.1
    when the coordinator is on loopback, else gloo's choice)."""
    global _job
    _check_arguments(coordinator_address, num_processes, process_id)
    with _lock:
        if _job is not None:
            raise RuntimeError(f"autograd_xla.distributed.initialize was already called (process {_job.process_id} "
                               f"of {_job.num_processes}); call shutdown() first")
        backend.set_cpu_client_options(local_device_count)  # raises now if the CPU client has started
        service = None
        if process_id == 0:  # the coordination service lives in process 0, as with jax.distributed
            service = _jax.get_distributed_runtime_service(coordinator_address, num_processes,
                                                           heartbeat_timeout=heartbeat_timeout,
                                                           shutdown_timeout=shutdown_timeout)
        client = _jax.get_distributed_runtime_client(coordinator_address, process_id, init_timeout=init_timeout,
                                                     heartbeat_timeout=heartbeat_timeout,
                                                     shutdown_timeout=shutdown_timeout, use_compression=True)
        try:
            client.connect()
        except xc.XlaRuntimeError as e:
            if service is not None:
                service.shutdown()
            raise RuntimeError(f"process {process_id} could not join the job at {coordinator_address} within "
                               f"{init_timeout} s (are all {num_processes} processes started, with distinct "
                               f"process ids?): {e}") from None
        if hostname is None and interface is None and coordinator_address.startswith(_LOOPBACK):
            hostname = "127.0.0.1"
        collectives = _jax.make_gloo_tcp_collectives(client, hostname=hostname, interface=interface)
        backend.set_cpu_client_options(local_device_count, distributed_client=client, node_id=process_id,
                                       num_nodes=num_processes, collectives=collectives)
        _job = _Job(coordinator_address, num_processes, process_id, service, client)
    atexit.register(shutdown)


def _check_arguments(address, num_processes, process_id):
    if not isinstance(address, str) or ":" not in address:
        raise ValueError(f"coordinator_address must be 'host:port', got {address!r}")
    if not isinstance(num_processes, int) or isinstance(num_processes, bool) or num_processes < 1:
        raise ValueError(f"num_processes must be a positive integer, got {num_processes!r}")
    if not isinstance(process_id, int) or isinstance(process_id, bool) or not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must be an integer in [0, {num_processes}), got {process_id!r}")


def shutdown():
    """Leave the job: wait (up to initialize's shutdown_timeout) at a barrier for the other
    processes, then stop this process's client, and in process 0 the service. Called at exit
    when not called before. The CPU client keeps its devices but can no longer communicate."""
    global _job
    with _lock:
        job, _job = _job, None
    if job is None:
        return
    job.client.shutdown()
    if job.service is not None:
        job.service.shutdown()


def is_initialized():
    return _job is not None


def process_index():
    """This process's index in the job (0 without initialize)."""
    return _job.process_id if _job is not None else 0


def process_count():
    """How many processes the job has (1 without initialize)."""
    return _job.num_processes if _job is not None else 1


def local_devices(platform=None):
    """This process's devices of `platform` (None: the default platform), as jax.local_devices;
    autograd_xla.devices() lists every process's."""
    return list(backend.get_backend(platform).local_devices)


def key_value_client():
    """The coordination service's client (its key-value store: key_value_set[_bytes],
    blocking_key_value_get[_bytes]; its barriers: wait_at_barrier), or None without initialize."""
    return _job.client if _job is not None else None
