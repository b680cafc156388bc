"""One way to be a context manager: ``with X(...) as x:`` calls ``x.close()`` at the end."""

from __future__ import annotations

from typing import Self


class Closing:
    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
