from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def default_model_converted():
    """Convert the embedded default model once (cached on disk) before any service starts."""
    from tandem_core.model_loader import default_gguf_path, ensure_converted

    return ensure_converted(default_gguf_path())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the logs of every service a failing test used."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for name in item.fixturenames:
            svc = item.funcargs.get(name)
            if hasattr(svc, "logs"):
                report.sections.append((f"{name} log", svc.logs()[-20000:]))
