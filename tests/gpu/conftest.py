"""The GPU session ends when its tests end: what the tests started in the background is stopped.

torch.compile (the compiled AdamW and per-block graph tests) leaves a pool of compile-worker
processes that the interpreter otherwise waits for at exit, so ``pytest tests/gpu`` printed its
result and then sat for tens of seconds. The hook below shuts the pool down after the last test,
leaving pytest's exit status as it is, and names any other non-daemon thread still running (the
next thing that would keep the process alive) instead of hiding it.
"""

from __future__ import annotations

import threading

from biomoe.compat.inductor import shutdown_compile_workers


def pytest_sessionfinish(session, exitstatus) -> None:
    shutdown_compile_workers()
    lingering = [t.name for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()
                 and not t.daemon]
    if lingering:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"threads still running after the GPU tests: {', '.join(lingering)}")
