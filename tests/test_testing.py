"""zarchive.testing.check_handler: a third-party handler that keeps the contract passes, and each way
of breaking the contract is caught and named."""

from __future__ import annotations

import fractions
from pathlib import Path
from typing import Any

import pytest

import zarchive
from zarchive.testing import HandlerContractError, check_handler


class FractionHandler(zarchive.Handler):
    name = "testing.Fraction"

    def accepts(self, cls: type) -> bool:
        return cls is fractions.Fraction

    def save(self, obj: Any, ctx: Any) -> Any:
        return {"$type": self.name, "text": str(obj)}

    def load(self, node: dict[str, Any], ctx: Any) -> Any:
        text = node.get("text")
        if not isinstance(text, str):
            raise ctx.error("a 'testing.Fraction' node needs its 'text'")
        try:
            return fractions.Fraction(text)
        except (ValueError, ZeroDivisionError) as e:
            raise ctx.error(f"not a fraction: {text[:40]!r}") from e


class TrustingLoad(FractionHandler):
    name = "testing.TrustingFraction"

    def load(self, node: dict[str, Any], ctx: Any) -> Any:
        assert isinstance(node.get("text"), str), "bad node"  # the mistake this test is about
        return fractions.Fraction(node["text"])


class MaybeAccepts(FractionHandler):
    name = "testing.MaybeFraction"

    def accepts(self, cls: type) -> bool:
        return True if cls is fractions.Fraction else None  # type: ignore[return-value]


class Lossy(FractionHandler):
    name = "testing.LossyFraction"

    def load(self, node: dict[str, Any], ctx: Any) -> Any:
        return float(fractions.Fraction(super().load(node, ctx)))


class BlankName(FractionHandler):
    name = " testing.Fraction"


EXAMPLES = [fractions.Fraction(1, 3), fractions.Fraction(-22, 7), fractions.Fraction(0)]


def test_a_handler_that_keeps_the_contract_passes(tmp_path: Path) -> None:
    check_handler(FractionHandler(), EXAMPLES, tmp_path=tmp_path)
    check_handler(FractionHandler(), EXAMPLES[:1])  # a temporary folder of its own


@pytest.mark.parametrize(
    ("handler", "says"),
    [
        (TrustingLoad(), r"node with .* raised AssertionError: bad node"),
        (MaybeAccepts(), r"accepts\(\w+\) returned None, not a bool"),
        (Lossy(), r"read back by read differs"),
        (BlankName(), r"`name` must be a non-empty string without surrounding blanks"),
    ],
    ids=["load-asserts", "accepts-not-a-bool", "lossy-round-trip", "blank-name"],
)
def test_each_broken_promise_is_caught_and_named(handler: zarchive.Handler, says: str, tmp_path: Path) -> None:
    with pytest.raises(HandlerContractError, match=says):
        check_handler(handler, EXAMPLES, tmp_path=tmp_path)


def test_an_example_the_handler_does_not_accept_is_refused(tmp_path: Path) -> None:
    with pytest.raises(HandlerContractError, match="accepts\\(int\\) is False"):
        check_handler(FractionHandler(), [3], tmp_path=tmp_path)
    with pytest.raises(HandlerContractError, match="at least one example"):
        check_handler(FractionHandler(), [], tmp_path=tmp_path)
