"""How a desktop app uses localguide: load once, compile once, generate from a worker thread.

The Index is immutable and shared; each request gets its own cheap Guide. A UI would
append each streamed piece to a text widget; here we print them.
"""

import queue
import threading

import localguide

model = localguide.load()  # or localguide.load("/path/to/model.gguf", n_gpu_layers=-1)
DATE = r"\d{4}-\d{2}-\d{2}"
model.compile(regex=DATE)  # warm the disk cache at start-up, off the UI thread in a real app

pieces: "queue.Queue[str | None]" = queue.Queue()


def worker(prompt: str) -> None:
    try:
        for piece in model.stream(prompt, regex=DATE, max_tokens=12, seed=7):
            pieces.put(piece)
    except localguide.LocalguideError as e:  # show it to the user, keep the app alive
        pieces.put(f"[error: {e}]")
    finally:
        pieces.put(None)


threading.Thread(target=worker, args=("The Apollo 11 landing date (YYYY-MM-DD):",), daemon=True).start()
while (piece := pieces.get()) is not None:  # the UI loop would poll this queue
    print(piece, end="", flush=True)
print()
