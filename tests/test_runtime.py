"""mplint.runtime on CPU with real TensorFlow, Keras 3 and Keras 2 (tf_keras)."""

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
tf_keras = pytest.importorskip("tf_keras")

from mplint.runtime import apply_gradients, check_model, enable, scale_loss, wrap_optimizer  # noqa: E402

pytestmark = pytest.mark.tensorflow


@pytest.fixture(autouse=True)
def float32_after_each_test():
    yield
    keras.mixed_precision.set_global_policy("float32")
    tf_keras.mixed_precision.set_global_policy("float32")


def test_enable_auto_on_cpu_chooses_float32_and_says_why():
    choice = enable()
    assert choice.policy == "float32"
    assert choice.hardware.device == "CPU"
    assert "CPU" in choice.reason
    assert [f.rule_id for f in choice.findings] == ["MP801"]
    assert keras.mixed_precision.global_policy().name == "float32"


def test_enable_explicit_float16_on_cpu_sets_it_with_mp801():
    choice = enable("mixed_float16")
    assert (choice.policy, choice.keras) == ("mixed_float16", 3)
    assert [f.rule_id for f in choice.findings] == ["MP801"]
    assert keras.mixed_precision.global_policy().name == "mixed_float16"


def test_enable_bfloat16_has_no_mp801_and_works_inside_strategy_scope():
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        choice = enable("mixed_bfloat16")
        layer = keras.layers.Dense(4)
        layer.build((None, 3))
    assert choice.findings == ()
    assert layer.compute_dtype == "bfloat16"
    assert layer.kernel.dtype == "float32"


def test_enable_keras2_sets_the_tf_keras_policy():
    choice = enable("mixed_float16", keras=2)
    assert choice.keras == 2
    assert tf_keras.mixed_precision.global_policy().name == "mixed_float16"
    assert keras.mixed_precision.global_policy().name == "float32"


def test_enable_rejects_unknown_policy():
    with pytest.raises(ValueError, match="policy must be one of"):
        enable("float16")


@pytest.mark.parametrize("module", [keras, tf_keras], ids=["keras3", "keras2"])
def test_wrap_optimizer_only_under_mixed_float16(module):
    sgd = module.optimizers.SGD(1.0)
    assert wrap_optimizer(sgd) is sgd  # float32: nothing to scale
    module.mixed_precision.set_global_policy("mixed_bfloat16")
    assert wrap_optimizer(sgd) is sgd
    module.mixed_precision.set_global_policy("mixed_float16")
    wrapped = wrap_optimizer(sgd)
    assert isinstance(wrapped, module.mixed_precision.LossScaleOptimizer)
    assert wrap_optimizer(wrapped) is wrapped


@pytest.mark.quick  # TensorFlow, Keras 3 and Keras 2 installed and training: in the one-minute subset
@pytest.mark.parametrize("module", [keras, tf_keras], ids=["keras3", "keras2"])
def test_scale_then_apply_unscales_exactly_once(module):
    module.mixed_precision.set_global_policy("mixed_float16")
    opt = wrap_optimizer(module.optimizers.SGD(learning_rate=1.0))
    var = tf.Variable(1.0) if module is tf_keras else keras.Variable(1.0)
    with tf.GradientTape() as tape:
        loss = 3.0 * tf.convert_to_tensor(var)
        scaled = scale_loss(opt, loss)
    assert float(scaled) == 3.0 * 32768
    (grad,) = tape.gradient(scaled, [var])
    assert float(grad) == 3.0 * 32768
    apply_gradients(opt, [(grad, var)])
    assert float(tf.convert_to_tensor(var)) == pytest.approx(1.0 - 3.0)


def test_scale_loss_honours_keras3_loss_scale_factor():
    var = keras.Variable(1.0)
    opt = keras.optimizers.SGD(learning_rate=1.0, loss_scale_factor=128.0)
    with tf.GradientTape() as tape:
        loss = scale_loss(opt, 3.0 * var)
    assert float(loss) == 384.0
    apply_gradients(opt, [(tape.gradient(loss, var), var)])
    assert float(var.numpy()) == -2.0  # 1 - 3: the true gradient, not 128x too small


def test_scale_loss_is_identity_without_loss_scale_optimizer():
    opt = keras.optimizers.SGD(1.0)
    var = keras.Variable(1.0)
    assert scale_loss(opt, 5.0) == 5.0
    apply_gradients(opt, [(tf.constant(2.0), var)])
    assert float(tf.convert_to_tensor(var)) == pytest.approx(-1.0)


def test_check_model_reports_outputs_alignment_and_float16_variables():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential(
        [
            keras.Input((10,)),
            keras.layers.Dense(12, activation="relu", name="hidden"),
            keras.layers.Dense(16, dtype="float16", name="half"),
            keras.layers.Dense(3, activation="softmax", name="probs"),
        ],
        name="sequential",
    )  # named: Keras numbers unnamed models per process, so other tests' models would show
    found = [(f.rule_id, f.layer) for f in check_model(model)]
    assert found == [
        ("MP806", "probs"),
        ("MP101", "probs"),
        ("MP807", "hidden"),  # output 12
        ("MP807", "half"),  # input 12
        ("MP602", "sequential/half/kernel"),
        ("MP602", "sequential/half/bias"),
    ]


def test_check_model_clean_when_output_is_float32_and_sizes_align():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential(
        [keras.Input((10,)), keras.layers.Dense(16), keras.layers.Dense(3, activation="softmax", dtype="float32")]
    )
    assert check_model(model) == []


def test_check_model_keras2_softmax_output():
    tf_keras.mixed_precision.set_global_policy("mixed_float16")
    model = tf_keras.Sequential(
        [tf_keras.layers.Dense(8, input_shape=(4,)), tf_keras.layers.Dense(3, activation="softmax")]
    )
    assert [f.rule_id for f in check_model(model)] == ["MP806", "MP101"]


def test_check_model_class_count_before_a_float32_softmax_is_no_mp807():
    """The mixed precision guide's pattern: logits Dense(10) then a float32 softmax Activation."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    inputs = keras.Input(shape=(784,), name="digits")
    x = keras.layers.Dense(64, activation="relu", name="dense_1")(inputs)
    x = keras.layers.Dense(10, name="dense_logits")(x)
    x = keras.layers.Dropout(0.1)(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="predictions")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    assert check_model(model) == []
    hidden = keras.Model(
        inputs,
        keras.layers.Activation("softmax", dtype="float32")(
            keras.layers.Dense(16, name="after")(keras.layers.Dense(10, name="bottleneck")(inputs))
        ),
    )
    # a hidden 10 is still misaligned: the output and input sides of the matmuls it joins
    assert [(f.rule_id, f.layer) for f in check_model(hidden)] == [("MP807", "bottleneck"), ("MP807", "after")]


def test_check_model_class_count_through_shape_preserving_layers_keras2_and_sequential():
    tf_keras.mixed_precision.set_global_policy("mixed_float16")
    inputs = tf_keras.Input(shape=(32,))
    x = tf_keras.layers.Dense(64)(inputs)
    logits = tf_keras.layers.Dense(10, name="logits")(x)
    outputs = tf_keras.layers.Activation("softmax", dtype="float32")(tf_keras.layers.Dropout(0.2)(logits))
    assert check_model(tf_keras.Model(inputs, outputs)) == []
    keras.mixed_precision.set_global_policy("mixed_float16")
    sequential = keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(64),
            keras.layers.Dense(10, name="logits"),
            keras.layers.Softmax(dtype="float32"),
        ]
    )
    assert check_model(sequential) == []
    backbone = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64), keras.layers.Dense(10, name="head")])
    outer = keras.Model(backbone.inputs, keras.layers.Activation("linear", dtype="float32")(backbone.outputs[0]))
    assert check_model(outer) == []
