"""The shared model-output analysis: which expressions and layers produce model outputs."""

from __future__ import annotations

import textwrap

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper

from mplint.analysis.model_outputs import is_output_layer, model_outputs
from mplint.engine.context import FileContext
from mplint.project.facts import ProjectFacts


def _context(code: str) -> FileContext:
    wrapper = MetadataWrapper(cst.parse_module(textwrap.dedent(code)))
    return FileContext("example.py", wrapper, ProjectFacts(), "example", False)


def _sites(code: str) -> list[tuple[str, str, str | None, int]]:
    context = _context(code)
    text = context.module.code_for_node
    return [
        (site.kind, text(site.expr), text(site.layer) if site.layer is not None else None, context.position(site.expr).start.line)
        for site in model_outputs(context)
    ]


def test_sequential_list_and_layers_keyword():
    assert _sites(
        """
        from tensorflow.keras import layers as L
        import tensorflow as tf
        a = tf.keras.Sequential([L.Dense(64), L.Dense(10, activation="softmax")])
        b = tf.keras.models.Sequential(layers=[L.Dense(1)])
        """
    ) == [
        ("sequential", 'L.Dense(10, activation="softmax")', 'L.Dense(10, activation="softmax")', 4),
        ("sequential", "L.Dense(1)", "L.Dense(1)", 5),
    ]


def test_sequential_add_last_in_statement_order_wins():
    assert _sites(
        """
        from keras import layers, Sequential
        model = Sequential([layers.Dense(4)])
        model.add(layers.Dense(8))
        model.add(layers.Dense(2))
        other = [1]
        other.add(layers.Dense(3))
        """
    ) == [("sequential-add", "layers.Dense(2)", "layers.Dense(2)", 5)]


def test_functional_follows_assignments_to_the_layer_construction():
    assert _sites(
        """
        import tensorflow.keras as k
        inputs = k.Input((4,))
        x = k.layers.Dense(8)(inputs)
        head = k.layers.Dense(1)
        x = head(x)
        y = x
        model = k.Model(inputs, y)
        x = k.layers.Dense(99)(x)
        """
    ) == [("functional", "head(x)", "k.layers.Dense(1)", 6)]


def test_functional_list_and_dict_outputs_each_count():
    assert _sites(
        """
        import keras
        inputs = keras.Input((4,))
        a = keras.layers.Dense(1)(inputs)
        outs = {"a": a, "b": keras.ops.sigmoid(a)}
        model = keras.Model(inputs=inputs, outputs=[outs["a"], keras.layers.Dense(2)(inputs)])
        both = keras.Model(inputs, outs)
        """
    ) == [
        ("functional", "outs[\"a\"]", None, 6),
        ("functional", "keras.layers.Dense(2)(inputs)", "keras.layers.Dense(2)", 6),
        ("functional", "keras.layers.Dense(1)(inputs)", "keras.layers.Dense(1)", 4),
        ("functional", "keras.ops.sigmoid(a)", None, 5),
    ]


def test_subclass_call_returns_follow_self_attributes_and_local_bases():
    assert _sites(
        """
        import tf_keras
        class Base(tf_keras.Model):
            pass
        class Net(Base):
            def __init__(self):
                super().__init__()
                self.body = tf_keras.layers.Dense(8)
                self.head = tf_keras.layers.Dense(1)
            def helper(self, x):
                return x
            def call(self, x):
                x = self.body(x)
                if self.training:
                    return self.head(x), x
                return x
        class NotAModel:
            def call(self, x):
                return x
        """
    ) == [
        ("subclass-call", "self.head(x)", "tf_keras.layers.Dense(1)", 15),
        ("subclass-call", "self.body(x)", "tf_keras.layers.Dense(8)", 13),
    ]


def test_is_output_layer_only_for_output_constructions():
    context = _context(
        """
        from keras import layers
        import keras
        inputs = keras.Input((4,))
        x = layers.Dense(12)(inputs)
        model = keras.Model(inputs, layers.Dense(10)(x))
        """
    )
    dense = {context.module.code_for_node(c): c for c in m.findall(context.module, m.Call(func=m.Attribute(attr=m.Name("Dense"))))}
    assert is_output_layer(context, dense["layers.Dense(10)"])
    assert not is_output_layer(context, dense["layers.Dense(12)"])


def test_non_keras_sequential_and_model_are_ignored():
    assert _sites(
        """
        from torch.nn import Sequential, Linear
        net = Sequential(Linear(2, 2))
        class Model:
            pass
        m = Model()
        """
    ) == []
