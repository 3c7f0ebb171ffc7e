"""The typed values the training tier reads: --packing parsed once (packed_rows.PackingMode)
and a batch's shares over replicas and micro-batches (distribution.BatchShares)."""

import itertools

import pytest

from bert_tf import row_packing
from bert_tf.training import distribution
from bert_tf.training import packed_rows


def test_packing_mode_parses_the_flag_once_and_answers_every_question():
  assert packed_rows.PackingMode.parse(" Exact ").value == "exact"
  assert packed_rows.PackingMode.parse(None).value == "none"
  table = {"none": (False, False, False, False), "exact": (True, True, False, False),
           "static": (True, False, True, False), "auto": (False, False, False, True)}
  for value, expected in table.items():
    mode = packed_rows.PackingMode.parse(value)
    assert (mode.packed, mode.exact, mode.static, mode.auto) == expected, value
  with pytest.raises(row_packing.PackingError, match="--packing must be one of"):
    packed_rows.PackingMode.parse("tight")


def test_packing_mode_resolves_auto_as_row_packing_does():
  for value, exact_task, xla in itertools.product(row_packing.MODES, (False, True),
                                                  (False, True)):
    resolved = packed_rows.PackingMode.parse(value).resolved(exact_task, xla)
    assert resolved.value == row_packing.resolve(value, exact_task=exact_task, xla=xla)
  assert packed_rows.PackingMode("auto").resolved(True, False).exact
  assert not packed_rows.PackingMode("auto").resolved(False, False).packed  # SQuAD's


def test_a_packing_knows_its_mode():
  assert packed_rows.Packing(row_packing.STATIC, rows=3).static
  assert packed_rows.Packing(row_packing.EXACT).exact
  assert not packed_rows.Packing(row_packing.EXACT).static


def test_batch_shares_are_the_divisions_they_replace():
  for batch, replicas, accumulation in itertools.product((8, 12, 32, 96), (1, 2, 4), (1, 2, 4)):
    shares = distribution.BatchShares(batch, replicas, accumulation)
    assert shares.per_replica == batch // replicas
    assert shares.micro_batch == batch // accumulation
    assert shares.micro_batch_per_replica == batch // replicas // accumulation
    # Floor division composes: the global micro-batch split over the replicas is the same.
    assert shares.micro_batch // replicas == shares.micro_batch_per_replica
  assert distribution.BatchShares(32, 4, 2) == (32, 4, 2)
  assert distribution.BatchShares(10).per_replica == 10
