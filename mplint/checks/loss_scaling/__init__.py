"""MP201-MP207: loss scaling of Keras/TensorFlow training under float16.

The rules, their base class (``_gradient_site_rule``) and the analyses only they use: which optimizer a
``tape.gradient`` result reaches and what happens on the way (``optimizer_flow``, the analysis the rules ask for;
``sites``, what a gradient site holds; ``paths``, the paths its flags and optimizer tests select), the fixes' text
(``fixes``), and the function summaries that let a call into another file count as scaling or as building a
LossScaleOptimizer (``optimizer_summaries``).
"""
