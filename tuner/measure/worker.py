"""Entry point of a worker process (`python -m tuner.measure.worker`): run tasks sent by `WorkerPool`.

Messages are length-prefixed pickles on the pipes between the pool and its own workers; nothing
read from files is ever unpickled. The worker's stdout is moved aside for these messages, so
anything a task prints lands in the log with its stderr, where the pool reads a crash's last words.
"""

from __future__ import annotations

import faulthandler
import importlib
import os
import pickle
import signal
import struct
import sys
import traceback
from typing import IO, Any

HEADER = struct.Struct("<Q")


def read_message(stream: IO[bytes]) -> Any:
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        raise EOFError
    size = HEADER.unpack(header)[0]
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


def write_message(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the pool's to handle, not each worker's
    faulthandler.enable()  # a segfault's Python stack goes to the log the pool reads
    channel_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    channel_in = os.fdopen(os.dup(0), "rb")
    for module in filter(None, os.environ.get("AUTOTUNE_WORKER_PRELOAD", "").split(",")):
        importlib.import_module(module)  # before "ready": start-up is not charged to the first task
    write_message(channel_out, ("ready", None))
    while True:
        try:
            task = read_message(channel_in)
        except EOFError:
            return
        if task is None:
            return
        function, payload = task
        try:
            reply = ("ok", function(payload))
        except BaseException:  # a task's failure is data for the pool, never the worker's end
            reply = ("error", traceback.format_exc())
        sys.stderr.flush()
        write_message(channel_out, reply)


if __name__ == "__main__":
    main()
