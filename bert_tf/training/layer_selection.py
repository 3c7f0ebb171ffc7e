"""Which encoder layers of a deeper --init_checkpoint a shallower model starts from.

A student with fewer layers than the checkpoint it starts from (a 3-layer student from a 6-layer
teacher, DistilBERT's 6 from BERT-Base's 12) takes `--init_layers` of them, in order:

  even    evenly spaced from the first to the last (the default): layer i of L_s takes the
          checkpoint's round(i * (L_t - 1) / (L_s - 1)), halves rounded up, so 6 of 12 are
          0, 2, 4, 7, 9, 11 (DistilBERT's choice) and 3 of 6 are 0, 3, 5; one layer takes 0
  first   the first L_s (what loading by name does, and what every run did before the flag)
  0,3,5   the checkpoint's layers by their number in its names (bert/encoder/layer_N, from 0)

The embeddings, the pooler and a head the model has load as usual. A checkpoint with no more
layers than the model loads as it is (layer N into layer N), whatever --init_layers says
(an explicit list then must name exactly the model's layers 0..L-1, else it is refused).
"""

import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf.model import checkpoints

INIT_LAYERS_FLAG = "--init_layers"
EVEN, FIRST = "even", "first"
_LAYER_NAME = re.compile(r"^bert/encoder/layer_(\d+)/")


class InitLayersError(ValueError):
  """An --init_layers value that does not fit (the message names the flag)."""


def parse_init_layers(value: Optional[str]) -> Tuple[str, Tuple[int, ...]]:
  """(kind, layers) of an --init_layers value: ("even", ()), ("first", ()) or ("list", the
  checkpoint's layer numbers from 0).

  Raises:
    InitLayersError: one line naming --init_layers and what is wrong.
  """
  text = (value or EVEN).strip().lower()
  if text in (EVEN, FIRST):
    return text, ()
  items = [item.strip() for item in text.split(",")]
  if not all(item.isdigit() for item in items):
    raise InitLayersError(f"{INIT_LAYERS_FLAG}={value}: give {EVEN}, {FIRST}, or the "
                          "checkpoint's layer numbers from 0 in increasing order, e.g. 0,3,5")
  layers = tuple(int(item) for item in items)
  if list(layers) != sorted(set(layers)):
    raise InitLayersError(f"{INIT_LAYERS_FLAG}={value}: the layers must increase, each given "
                          "once (a layer feeds the next)")
  return "list", layers


def evenly_spaced(model_layers: int, checkpoint_layers: int) -> List[int]:
  """Layer i -> round(i * (L_t - 1) / (L_s - 1)) (halves up), from the first to the last."""
  if model_layers <= 1:
    return [0] * model_layers
  span, steps = checkpoint_layers - 1, model_layers - 1
  return [(2 * i * span + steps) // (2 * steps) for i in range(model_layers)]


def chosen_layers(value: Optional[str], model_layers: int, checkpoint_layers: int) -> List[int]:
  """The checkpoint layer each of the model's layers takes, in the model's order.

  Raises:
    InitLayersError: an explicit list of the wrong length or past the checkpoint's layers.
  """
  kind, layers = parse_init_layers(value)
  if kind == "list":
    if len(layers) != model_layers or layers[-1] >= checkpoint_layers:
      raise InitLayersError(
          f"{INIT_LAYERS_FLAG}={value}: the model has {model_layers} layers and the checkpoint "
          f"{checkpoint_layers} (numbered 0..{checkpoint_layers - 1}): name {model_layers} of "
          "them")
    return list(layers)
  if checkpoint_layers <= model_layers or kind == FIRST:
    return list(range(min(model_layers, checkpoint_layers)))
  return evenly_spaced(model_layers, checkpoint_layers)


def select_layers(values: Mapping[str, np.ndarray],
                  layers: Sequence[int]) -> Dict[str, np.ndarray]:
  """values (original names) with the checkpoint's layer layers[i] renamed to layer i, and its
  other encoder layers left out."""
  target = {source: i for i, source in enumerate(layers)}
  selected = {}
  for name, value in values.items():
    match = _LAYER_NAME.match(name)
    if match is None:
      selected[name] = value
    elif int(match.group(1)) in target:
      selected[f"bert/encoder/layer_{target[int(match.group(1))]}/{name[match.end():]}"] = value
  return selected


def checkpoint_depth(path: str) -> int:
  """The number of encoder layers of any checkpoint checkpoints.read_weights reads: from the
  names it holds (our training checkpoints, the original's), else the config beside it, else
  by reading its weights."""
  resolved = checkpoints.resolve_checkpoint(path)
  source_format = checkpoints.detect_format(resolved)
  if source_format == "bert_tf":
    names = checkpoints.training_checkpoint_layers(resolved)
    return len([name for name in names if re.fullmatch(r"layer_\d+", name)])
  if source_format == "tf1":
    names = tf.train.load_checkpoint(resolved).get_variable_to_shape_map()
    return checkpoints.model_sizes({name: () for name in names}).get("num_hidden_layers", 0)
  try:
    return checkpoints.config_beside(resolved, source_format).num_hidden_layers
  except (FileNotFoundError, ValueError):
    pass
  values = checkpoints.read_weights(resolved, source_format=source_format)
  return checkpoints.model_sizes({k: np.shape(v) for k, v in values.items()}).get(
      "num_hidden_layers", 0)


def model_depth(model) -> int:
  """The number of encoder layers of a model built here (its layer_N layers)."""
  return len([layer for layer in model.layers if re.fullmatch(r"layer_\d+", layer.name)])


def load_selected_layers(model, path: str, init_layers: Optional[str]
                         ) -> Optional[checkpoints.LoadReport]:
  """Loads a checkpoint deeper than `model` (or with --init_layers given as a list) with the
  chosen encoder layers, logged; None when the checkpoint loads as it is (the caller's
  checkpoints.load_weights).

  Raises:
    InitLayersError: --init_layers does not fit the model and the checkpoint.
  """
  kind, _ = parse_init_layers(init_layers)
  depth, ours = checkpoint_depth(path), model_depth(model)
  if depth <= ours and kind != "list":
    return None
  layers = chosen_layers(init_layers, ours, depth)
  if depth <= ours and layers == list(range(ours)):
    return None
  logging.info("The model's %d encoder layers start from layers %s of the %d of %s (%s=%s)",
               ours, ",".join(map(str, layers)), depth, path, INIT_LAYERS_FLAG,
               init_layers or EVEN)
  values = select_layers(checkpoints.read_weights(path), layers)
  return checkpoints.set_original_weights(model, values, strict=False, source=path,
                                          optional=("cls/", "output_"))

