"""Multiple-choice scores and prediction files from the choices' logits (NumPy only).

eval_results: eval_accuracy (the share of examples whose highest-scored choice is the labelled
one), eval_loss (the mean cross-entropy of the softmax over the choices) and the original
run_classifier's `loss` (the mean of the eval batches' mean losses). The prediction file is a
TSV with a header: guid, the chosen choice's index, and the probability of each choice.
"""

from typing import Dict, Sequence

import numpy as np


def probabilities(logits: np.ndarray) -> np.ndarray:
  """Softmax over each example's choices ([E, C] float32)."""
  logits = np.asarray(logits, np.float64)
  shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
  return (shifted / shifted.sum(axis=-1, keepdims=True)).astype(np.float32)


def eval_results(logits: np.ndarray, labels: np.ndarray, batch_size: int) -> Dict[str, float]:
  """eval_accuracy, eval_loss and loss (the module docstring) of the examples' logits [E, C]
  and labels [E], in file order, read in eval batches of batch_size."""
  logits = np.asarray(logits, np.float64)
  labels = np.asarray(labels, np.int64)
  if not len(labels):
    raise ValueError("no example to evaluate")
  shifted = logits - logits.max(axis=-1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
  nll = -log_probs[np.arange(len(labels)), labels]
  correct = np.argmax(logits, axis=-1) == labels
  batch_means = [float(nll[i:i + batch_size].mean()) for i in range(0, len(nll), batch_size)]
  return dict(eval_accuracy=float(correct.mean()), eval_loss=float(nll.mean()),
              loss=float(np.mean(batch_means)))


def prediction_lines(guids: Sequence[str], probs: np.ndarray) -> str:
  """The prediction file: a header (guid, choice, probability_0 ..), then one line per
  example."""
  count = probs.shape[-1]
  lines = ["\t".join(["guid", "choice"] + [f"probability_{i}" for i in range(count)]) + "\n"]
  for guid, row in zip(guids, probs):
    lines.append("\t".join([str(guid), str(int(np.argmax(row)))] + [str(v) for v in row])
                 + "\n")
  return "".join(lines)
