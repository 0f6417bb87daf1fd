"""One server: an EngineLoop, its metrics, text codec and HTTP app, run by uvicorn.
uvicorn handles Ctrl-C (and SIGTERM): it stops accepting, lets open requests finish for
up to `grace_s`, then returns; the engine loop stops after its step in flight."""
from __future__ import annotations

import socket
import sys

import uvicorn

from batchlab.backend.runtime import Runtime
from batchlab.backend.server.app import create_app
from batchlab.backend.server.engine_loop import EngineLoop
from batchlab.backend.server.http_protocol import HeadTimeoutH11Protocol
from batchlab.backend.server.metrics import ServerMetrics
from batchlab.backend.server.protocol import Limits
from batchlab.backend.server.text import load_codec
from batchlab.core.config import SchedulerConfig
from batchlab.core.result import RunResult
from batchlab.core.speculative.config import SpeculativeConfig

SWITCH_INTERVAL_S = 0.0005


class Server:
    def __init__(self, runtime: Runtime, scheduler: SchedulerConfig, *, model_name: str,
                 api_key: str | None = None, temperature: float = 0.0, seed: int = 0,
                 max_body_bytes: int = 4 << 20, speculative: SpeculativeConfig | None = None) -> None:
        self.metrics = ServerMetrics(model_name)
        self.loop = EngineLoop(runtime, scheduler, temperature=temperature, seed=seed,
                               observer=self.metrics, speculative=speculative)
        spec = runtime.spec
        self.codec = load_codec(runtime.model.source, runtime.model.name, runtime.runner.vocab_size)
        self.limits = Limits(max_model_len=scheduler.max_model_len or spec.max_context,
                             vocab_size=runtime.runner.vocab_size, max_body_bytes=max_body_bytes)
        self.app = create_app(self.loop, self.codec, model_name, self.limits, self.metrics, api_key)

    def run(self, sock: socket.socket, grace_s: float = 5.0) -> None:
        """Serve on `sock` (see bind) until Ctrl-C / SIGTERM, then stop the engine loop."""
        # h11 with a deadline on request heads (http_protocol.py); an idle keep-alive
        # connection closes after uvicorn's timeout_keep_alive (5 s, its default).
        config = uvicorn.Config(self.app, log_level="warning", http=HeadTimeoutH11Protocol,
                                access_log=False, timeout_graceful_shutdown=grace_s, lifespan="off")
        # The engine thread holds the GIL between torch kernels; a shorter switch
        # interval (default 5 ms) lets the HTTP thread send a step's tokens sooner.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self.loop.start()
        try:
            uvicorn.Server(config).run(sockets=[sock])
        except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled: done
            pass
        finally:
            self.loop.stop()
            sock.close()

    def result(self, meta: dict | None = None) -> RunResult:
        return self.loop.result(meta)
