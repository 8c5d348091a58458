"""The compile thread: one background thread on which XLA's compiles of tiered signatures,
and the programs their ladders climb to, run (tiering.py decides what to hand it), and the
Job each such compile is. One, not one per signature or a pool: XLA's CPU compile of one
module keeps a core busy, and a job's callers meanwhile run plain autograd on the others.
"""
import atexit
import collections
import contextlib
import threading


class Job:
    """One signature's compile handed to the thread: `done` is set when it has finished
    (the entry compiled, or `error` holding what the compile raised); `forgotten` says the
    function's cache was cleared meanwhile, so the program it makes is not to be kept."""

    __slots__ = ("done", "error", "forgotten")

    def __init__(self):
        self.done = threading.Event()
        self.error = None
        self.forgotten = False

    @classmethod
    def start(cls, work):
        """A Job running `work(job)` on the compile thread, what it raises kept in `error`."""
        job = cls()

        def run():
            try:
                work(job)
            except Exception as e:
                job.error = e
            finally:
                job.done.set()
        compile_thread.submit(run)
        return job

    def running(self):
        return not self.done.is_set()


class CompileThread:
    """One daemon thread running compile jobs in the order they came, started by the first."""

    def __init__(self):
        self._cond = threading.Condition()
        self._jobs = collections.deque()
        self._busy = False
        self._paused = 0
        self._stopping = False
        self._thread = None

    def submit(self, work):
        """Run `work()` (which must not raise) on the thread, after those submitted before it."""
        with self._cond:
            self._jobs.append(work)
            if self._thread is None or not self._thread.is_alive():  # the first, or after a fork
                self._thread = threading.Thread(target=self._serve, name="autograd_xla compile", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _serve(self):
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or (self._jobs and not self._paused))
                if self._stopping:
                    return
                work, self._busy = self._jobs.popleft(), True
            try:
                work()
            finally:
                del work  # holds the function (and its executables) until the next job otherwise
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def idle(self):
        """Whether no job is waiting or running."""
        with self._cond:
            return not self._jobs and not self._busy

    def wait(self, timeout=None):
        """Wait until every job submitted so far has run (not while paused); whether they have."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._jobs and not self._busy, timeout)

    @contextlib.contextmanager
    def paused(self):
        """Jobs submitted or waiting meanwhile do not start until the block ends (the one
        running goes on): tests use it to hold a compile in flight for as long as they need."""
        with self._cond:
            self._paused += 1
        try:
            yield
        finally:
            with self._cond:
                self._paused -= 1
                self._cond.notify_all()

    def stop(self):
        """At exit: drop the jobs not started and wait for the one running. A daemon thread
        left inside XLA's compile while the interpreter tears down aborts the exit (seen every
        time: "terminate called after throwing an instance of ''"); the wait costs at most the
        rest of that one compile."""
        with self._cond:
            self._jobs.clear()
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


#: The process's compile thread.
compile_thread = CompileThread()
atexit.register(compile_thread.stop)
