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
        (
            site.kind,
            text(site.expr),
            text(site.layer) if site.layer is not None else None,
            context.position(site.expr).start.line,
        )
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
        ("functional", 'outs["a"]', None, 6),
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
    dense = {
        context.module.code_for_node(c): c
        for c in m.findall(context.module, m.Call(func=m.Attribute(attr=m.Name("Dense"))))
    }
    assert is_output_layer(context, dense["layers.Dense(10)"])
    assert not is_output_layer(context, dense["layers.Dense(12)"])


def test_non_keras_sequential_and_model_are_ignored():
    assert (
        _sites(
            """
        from torch.nn import Sequential, Linear
        net = Sequential(Linear(2, 2))
        class Model:
            pass
        m = Model()
        """
        )
        == []
    )


def _roles(code: str) -> list[tuple[str, str, bool]]:
    context = _context(code)
    text = context.module.code_for_node
    return [(text(site.expr), site.role, site.cast_before_loss) for site in model_outputs(context)]


def test_roles_trained_sub_inference_and_unknown():
    assert _roles(
        """
        import keras
        from keras import layers

        augment = keras.Sequential([layers.RandomFlip(), layers.Rescaling(1 / 255)])
        enc_in = keras.Input((8,))
        encoder = keras.Model(enc_in, layers.Dense(16)(enc_in))
        inputs = keras.Input((8,))
        model = keras.Model(inputs, layers.Dense(1)(encoder(augment(inputs))))
        model.compile("adam", "mse")
        exported = keras.Sequential([layers.Dense(2)])

        def build_text_encoder():
            return keras.Sequential([layers.Dense(3)])

        def build_classifier():
            return keras.Sequential([layers.Dense(4)])

        def test_predict():
            local = keras.Sequential([layers.Dense(5)])
            local.predict([[1.0]])

        def test_checkpoint(tf):
            kept = keras.Sequential([layers.Dense(6)])
            tf.train.Checkpoint(model=kept)
        """
    ) == [
        ("layers.Dense(16)(enc_in)", "sub", False),
        ("layers.Dense(1)(encoder(augment(inputs)))", "trained", False),
        ("layers.Rescaling(1 / 255)", "sub", False),
        ("layers.Dense(2)", "unknown", False),
        ("layers.Dense(3)", "sub", False),
        ("layers.Dense(4)", "unknown", False),
        ("layers.Dense(5)", "inference", False),
        ("layers.Dense(6)", "unknown", False),
    ]


def test_a_trained_model_passes_its_role_to_the_sub_model_that_produces_its_output():
    assert _roles(
        """
        import keras
        from keras import layers
        head = keras.Sequential([layers.Dense(8), layers.Dense(1)])
        inputs = keras.Input((4,))
        model = keras.Model(inputs, head(inputs))
        model.fit([[1.0]], [[1.0]])
        """
    ) == [("head(inputs)", "trained", False), ("layers.Dense(1)", "trained", False)]


def test_models_built_inside_layers_are_components_and_custom_loops_train():
    assert _roles(
        """
        import tensorflow as tf

        class Block(tf.keras.layers.Layer):
            def __init__(self):
                super().__init__()
                self.inner = tf.keras.Sequential([tf.keras.layers.Dense(7)])

        def loop(x, y):
            model = tf.keras.Sequential([tf.keras.layers.Dense(9)])
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(y - model(x)))
            return tape.gradient(loss, model.trainable_variables)

        def cast_loop(x, y):
            model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
            with tf.GradientTape() as tape:
                pred = model(x)
                pred = tf.cast(pred, tf.float32)
                loss = tf.reduce_mean(tf.square(y - pred))
            return tape.gradient(loss, model.trainable_variables)
        """
    ) == [
        ("tf.keras.layers.Dense(7)", "sub", False),
        ("tf.keras.layers.Dense(9)", "trained", False),
        ("tf.keras.layers.Dense(10)", "trained", True),
    ]


def test_subclassed_models_by_their_instances_and_train_step():
    assert _roles(
        """
        import keras

        class Library(keras.Model):
            def call(self, x):
                return self.head(x)

        class Tower(keras.Model):
            def call(self, x):
                return self.dense(x)

        class Outer(keras.Model):
            def __init__(self):
                super().__init__()
                self.tower = Tower()

        class Custom(keras.Model):
            def call(self, x):
                return self.out(x)

            def train_step(self, data):
                x, y = data
                y_pred = keras.ops.cast(self(x), "float32")
                return {"loss": self.compute_loss(y=y, y_pred=y_pred)}
        """
    ) == [
        ("self.head(x)", "unknown", False),
        ("self.dense(x)", "sub", False),
        ("self.out(x)", "trained", True),
    ]


def test_output_layers_follow_shape_preserving_layers_back_to_the_class_count():
    context = _context(
        """
        import keras
        from keras import layers
        inputs = keras.Input((784,))
        x = layers.Dense(64, activation="relu")(inputs)
        x = layers.Dense(10, name="dense_logits")(x)
        x = layers.Dropout(0.1)(x)
        outputs = layers.Activation("softmax", dtype="float32", name="predictions")(x)
        model = keras.Model(inputs, outputs)
        seq = keras.Sequential([layers.Dense(32), layers.Dense(7), layers.ReLU(), layers.Softmax(dtype="float32")])
        cast = keras.Model(inputs, keras.ops.cast(layers.Dense(5)(x), "float32"))
        """
    )
    dense = {
        context.module.code_for_node(c): c
        for c in m.findall(context.module, m.Call(func=m.Attribute(attr=m.Name("Dense"))))
    }
    assert is_output_layer(context, dense['layers.Dense(10, name="dense_logits")'])
    assert is_output_layer(context, dense["layers.Dense(7)"])
    assert is_output_layer(context, dense["layers.Dense(5)"])
    assert not is_output_layer(context, dense['layers.Dense(64, activation="relu")'])
    assert not is_output_layer(context, dense["layers.Dense(32)"])


def test_library_model_classes_named_or_filed_as_parts_are_components():
    def roles(code, module):
        wrapper = MetadataWrapper(cst.parse_module(textwrap.dedent(code)))
        context = FileContext("m.py", wrapper, ProjectFacts(), module, False)
        return [site.role for site in model_outputs(context)]

    head = """
        import tf_keras
        class MaskScoring(tf_keras.Model):
            def call(self, x):
                return self.classifier(x)
        """
    assert roles(head, "official.vision.modeling.heads.segmentation_heads") == ["sub"]
    assert roles(head, "official.vision.modeling.maskrcnn_model") == ["unknown"]
    assert roles(head.replace("MaskScoring", "FpnDecoder"), "pkg.models") == ["sub"]
    assert roles(head.replace("MaskScoring", "Headline"), "pkg.models") == ["unknown"]


def test_a_model_rebound_in_another_branch_keeps_its_later_uses():
    assert _roles(
        """
        import keras
        def build(kind, Ranking):
            if kind == "cross":
                interaction = keras.Sequential([keras.layers.Dense(4)])
            else:
                interaction = keras.Sequential([keras.layers.Dense(8)])
            return Ranking(feature_interaction=interaction)

        def twice():
            model = keras.Sequential([keras.layers.Dense(3)])
            model.predict([[1.0]])
            model = keras.Sequential([keras.layers.Dense(5)])
            model.fit([[1.0]], [[1.0]])
        """
    ) == [
        ("keras.layers.Dense(4)", "sub", False),
        ("keras.layers.Dense(8)", "sub", False),
        ("keras.layers.Dense(3)", "inference", False),
        ("keras.layers.Dense(5)", "trained", False),
    ]


def test_outputs_cast_by_a_project_helper_or_map_structure_before_the_loss():
    assert _roles(
        """
        import tensorflow as tf
        from official.modeling import tf_utils

        def helper_loop(x, y):
            model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
            with tf.GradientTape() as tape:
                pred = tf_utils.fp16_to_fp32_nested(model(x, training=True))
                loss = tf.reduce_mean(tf.square(y - pred))
            return tape.gradient(loss, model.trainable_variables)

        def compiled(x, y):
            model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
            outputs = tf.nest.map_structure(lambda t: tf.cast(t, tf.float32), model(x))
            model.compile("sgd", "mse")

        def one_uncast_use(x, y):
            model = tf.keras.Sequential([tf.keras.layers.Dense(3)])
            with tf.GradientTape() as tape:
                a = tf.cast(model(x), tf.float32)
                b = model(y)
                loss = tf.reduce_mean(tf.square(a - b))
            return tape.gradient(loss, model.trainable_variables)
        """
    ) == [
        ("tf.keras.layers.Dense(1)", "trained", True),
        ("tf.keras.layers.Dense(2)", "trained", False),  # compile(): Keras computes the loss on the raw outputs
        ("tf.keras.layers.Dense(3)", "trained", False),
    ]
