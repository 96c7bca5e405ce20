"""A ledger for the faces' conversation tests: a reversible refund and an irreversible payment,
each counting its handler's real calls, behind a runner on any store."""

from __future__ import annotations

import threading
from typing import Any

from agentkit import ToolRegistry, ToolRunner, ToolSpec


class Ledger:
    """``refunds`` and ``payments`` list every real call of the handlers, in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.refunds: list[str] = []
        self.payments: list[str] = []

        def refund(order_id: str, cents: int) -> str:
            """Refund an order (reversible: a refund can be charged back)."""
            with self._lock:
                self.refunds.append(order_id)
            return f"refunded {cents} cents on {order_id}"

        def send_payment(to: str, cents: int) -> str:
            """Send a payment; it cannot be taken back."""
            with self._lock:
                self.payments.append(to)
            return f"paid {cents} cents to {to}"

        self.registry = ToolRegistry([
            ToolSpec("refund", "Refund an order.", "reversible_write", 10.0, 1, 2000, refund),
            ToolSpec("send_payment", "Send a payment.", "irreversible_write", 10.0, 1, 2000,
                     send_payment),
        ])

    def runner(self, store: Any = None) -> ToolRunner:
        return ToolRunner(self.registry, store=store, sleep=lambda seconds: None)


REFUND = {"order_id": "o-1", "cents": 500}
PAYMENT = {"to": "ada", "cents": 100}
