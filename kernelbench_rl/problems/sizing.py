"""Small sizes for problems that do not declare `KBRL_SMALL_SIZES` (external KernelBench files).

Static (the source is parsed, never run): the problem's size constants shrink so Triton's CPU
interpreter can run it, keeping the relations its own code relies on.

- Module-level constants are evaluated in order, expressions included (`N = 2048 * 2`), as are
  chained and tuple assignments (`height = width = 128`, `D, H, W = 16, 32, 32`) and the ints
  inside tuples and lists (`input_shape = (32768,)`, `layer_sizes = [400, 800]`, `[1024] * 16`).
  Names computed from other names (`bias_shape = (out_channels, 1, 1)`) follow by themselves.
- One original value gets one small value everywhere (`in_channels = out_channels = 64` stay
  equal, and so do `num_classes = 32768` and `input_shape = (32768,)`). A batch size is its own
  class (its equality with a channel or spatial size is a coincidence), unless broadcasting lines
  its dim up with another input's dim of that size (L1/100: predictions (batch, 32768) times
  targets (batch,)).
- Integers above 16 shrink to 16 (32 for originals of 4096 and more). Kept as written: values up
  to 16 unless the input budget needs them; hyperparameters (kernel sizes, strides, padding,
  dilation, head and group counts, by name) up to 64; small literals inside expressions (the 3 of
  `(batch_size, 3, 224, 224)`, the 4 of `4 * n_embd`); an input size the model also has as a
  parameter default (Swin's `img_size=224`). A shrunk value stays a multiple of every kept
  head/group/patch/block count, and of every small literal the code divides by (`out_channels // 4`),
  that divided the original (768 with `n_head = 12` becomes 24, not 16).
- get_inputs()'s tensor shapes are worked out from its calls (torch.rand(batch_size, C, H, W),
  randint(lo, hi, shape), ...), and each size feeding them gets a role from its position: batch
  (first dim), channels (second dim of a rank >= 3 tensor), spatial (the rest), features (second
  dim of a matrix). Spatial floors grow with the module's kernel, pool and dilation constants so
  convolutions and pools keep an output; ImageNet-sized images (224) keep 32 pixels, which deep
  networks downsample 32 times, or 32 x k before a fixed AvgPool2d(k). Those sizes are halved,
  batch first, then the largest, down to their floors, until the inputs hold at most
  `INPUT_BUDGET` elements (less by stride ** dims for a transposed convolution, whose output grows
  that much). A batch of one is the last resort, and never with BatchNorm (a 1x1 map or a
  BatchNorm1d needs two samples). Sizes written into get_inputs (VGG's 224x224 images) cannot
  shrink; then the other sizes (channel and class counts) go down to 4.
- A larger size that is not an input size keeps its relation to the input sizes: an upper bound
  stays one (`max_seqlen >= seq_len`), and a size that was exactly 2x or 4x an input size stays
  so (`out_channels == 2 * width`, where a transposed convolution's output width meets a
  LayerNorm over `out_channels`).
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field

_SHRINK_ABOVE = 64  # hyperparameters up to this stay as written
_SMALL_VALUE = 16
_SMALL_VALUE_FOR_HUGE = 32  # for originals >= 4096: keeps a little more work per row
_HUGE = 4096
_MAX_STEP = 64  # a shrunk value honours kept divisors only while their lcm stays this small

# Elements over all of get_inputs()'s tensors that the shrinking aims for.
INPUT_BUDGET = 8192

_BATCH_FLOOR = 2
_CHANNEL_FLOOR = 4
_FEATURE_FLOOR = 16
# Spatial floors by the number of spatial dims (1D, 2D, 3D), and for ImageNet-sized images.
_SPATIAL_FLOOR = {1: 32, 2: 16, 3: 8}
_IMAGE_ORIGINAL = 224
_IMAGE_FLOOR = 32
_IMAGE_DOWNSAMPLING = 32  # a fixed AvgPool2d(k) at the end of such a network needs k * 32 pixels
_RATIOS = (2, 4)  # exact multiples of an input size that a larger non-input size keeps

# Names of small constants that are hyperparameters, not sizes: never shrunk.
_HYPER_NAME = re.compile(
    r"kernel|stride|pad|dilation|group|head|pool_?size|window|patch|layer|cluster|ratio|block_len|block_size|stage",
    re.IGNORECASE,
)
_DIVISOR_NAME = re.compile(r"group|head|patch|window|block_len|block_size|cluster|chunk", re.IGNORECASE)
_KERNEL_NAME = re.compile(r"kernel|pool_?size|window", re.IGNORECASE)
_DILATION_NAME = re.compile(r"dilation", re.IGNORECASE)
_BATCH_NAME = re.compile(r"batch", re.IGNORECASE)
_BOUND_NAME = re.compile(r"max", re.IGNORECASE)  # max_seqlen: an upper bound of an input size

_TENSOR_MAKERS = {"rand", "randn", "ones", "zeros", "empty", "full", "randint"}

_BINOPS: dict[type, Callable] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_CALLS: dict[str, Callable] = {
    "int": int, "float": float, "tuple": tuple, "list": list, "max": max, "min": min, "abs": abs, "round": round,
    "len": len,
}

# A size class: (original value, kind). Kinds: "kept" (never changes), "batch" (a small batch
# size), "size" (everything else). All occurrences of one class get one new value.
Key = tuple[int, str]


class _Unknown(Exception):
    """An expression this evaluator does not follow (a call, an attribute, an unknown name)."""


@dataclass
class _Binding:
    name: str
    expr: ast.AST | None  # None: the value is not followed


@dataclass
class _Evaluator:
    """Evaluates module-level constant expressions, mapping each free int through `mapping`.

    A free int is the value of a maximal literal-only subexpression (`2048 * 2` is one, 4096),
    or an int inside one (`(32768,)`).
    """

    mapping: dict[Key, int] = field(default_factory=dict)
    joined: frozenset[int] = frozenset()  # batch sizes that stay one class with their equal sizes
    seen: list[tuple[Key, str]] = field(default_factory=list)

    def value(self, node: ast.AST, env: dict[str, object], name: str) -> object:
        if _literal_only(node):
            return self._map(_literal(node), name, whole=True)
        return self._eval(node, env, name)

    def _map(self, value: object, name: str, whole: bool) -> object:
        if type(value) is int:
            if value <= _SHRINK_ABOVE and (not whole or _HYPER_NAME.search(name)):
                kind = "kept"
            elif whole and _BATCH_NAME.search(name) and value not in self.joined:
                kind = "batch"
            else:
                kind = "size"
            self.seen.append(((value, kind), name))
            return self.mapping.get((value, kind), value)
        if isinstance(value, (tuple, list)):
            return type(value)(self._map(v, name, whole) for v in value)
        return value

    def _eval(self, node: ast.AST, env: dict[str, object], name: str) -> object:
        if _literal_only(node):
            return self._map(_literal(node), name, whole=False)
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise _Unknown(node.id)
            return env[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _binop(node.op, self._eval(node.left, env, name), self._eval(node.right, env, name))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = self._eval(node.operand, env, name)
            return -operand if isinstance(node.op, ast.USub) else +operand
        if isinstance(node, (ast.Tuple, ast.List)):
            items: list[object] = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    items.extend(self._eval(elt.value, env, name))
                else:
                    items.append(self._eval(elt, env, name))
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Subscript):
            return self._eval(node.value, env, name)[self._eval(node.slice, env, name)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS and not node.keywords:
            return _CALLS[node.func.id](*(self._eval(a, env, name) for a in node.args))
        raise _Unknown(type(node).__name__)


def _binop(op: ast.operator, left: object, right: object) -> object:
    """One arithmetic step, refusing the ones that could take long (`10 ** 10**9`, `[0] * 10**9`)."""
    if isinstance(op, ast.Pow) and not (
        isinstance(right, int) and abs(right) <= 64 and isinstance(left, (int, float)) and abs(left) < 2**64
    ):
        raise _Unknown("large power")
    if isinstance(op, ast.Mult) and isinstance(left, (tuple, list, str)) + isinstance(right, (tuple, list, str)):
        count = right if isinstance(left, (tuple, list, str)) else left
        if not isinstance(count, int) or count > 4096:
            raise _Unknown("large repeat")
    return _BINOPS[type(op)](left, right)


def _literal_only(node: ast.AST) -> bool:
    allowed = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Tuple, ast.List, ast.operator, ast.unaryop, ast.Load)
    return all(isinstance(n, allowed) for n in ast.walk(node))


def _literal(node: ast.AST) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_literal(e) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _literal(node.operand)
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _binop(node.op, _literal(node.left), _literal(node.right))
    raise _Unknown("literal")


def _bindings(tree: ast.Module) -> list[_Binding]:
    """Module-level names in assignment order (chained and tuple targets split per name)."""
    found: list[_Binding] = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found.append(_Binding(node.target.id, node.value))
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name):
                found.append(_Binding(target.id, node.value))
            elif isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in target.elts):
                value = node.value
                same_length = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
                for i, elt in enumerate(target.elts):
                    found.append(_Binding(elt.id, value.elts[i] if same_length else None))
    return found


def _representable(value: object) -> bool:
    if value is None or type(value) in (int, float, bool, str):
        return True
    return isinstance(value, (tuple, list)) and all(_representable(v) for v in value)


def _evaluate(bindings: list[_Binding], evaluator: _Evaluator) -> dict[str, object]:
    env: dict[str, object] = {}
    for binding in bindings:
        env.pop(binding.name, None)
        if binding.expr is None:
            continue
        try:
            value = evaluator.value(binding.expr, env, binding.name)
        except Exception:  # noqa: BLE001 - anything the evaluator cannot follow stays as written
            continue
        if _representable(value):
            env[binding.name] = value
    return env


# ---- get_inputs: the shapes of the tensors it makes ------------------------------------------


def _input_shapes(tree: ast.Module, env: dict[str, object]) -> list[tuple[int, ...]]:
    """Shapes of the tensors get_inputs() makes, as far as they can be followed statically."""
    func = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None)
    if func is None:
        return []
    local = dict(env)
    plain = _Evaluator()
    for stmt in func.body:  # simple local constants (dims, shapes) before the tensors
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            local.pop(stmt.targets[0].id, None)
            try:
                local[stmt.targets[0].id] = plain._eval(stmt.value, local, "")
            except Exception:  # noqa: BLE001
                pass
    shapes = []
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _TENSOR_MAKERS
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
            continue
        try:
            shape = _call_shape(node, local, plain)
        except Exception:  # noqa: BLE001
            continue
        if shape and all(type(d) is int for d in shape):
            shapes.append(shape)
    return shapes


def _call_shape(call: ast.Call, env: dict[str, object], plain: _Evaluator) -> tuple | None:
    def dims(node: ast.AST) -> list:
        value = plain._eval(node, env, "")
        return list(value) if isinstance(value, (tuple, list)) else [value]

    kwargs = {kw.arg: kw.value for kw in call.keywords if kw.arg}
    if "size" in kwargs:
        return tuple(dims(kwargs["size"]))
    name = call.func.attr  # type: ignore[attr-defined]
    if name == "randint":  # randint(high, size) or randint(low, high, size)
        return tuple(dims(call.args[-1])) if len(call.args) >= 2 else None
    if name == "full":
        return tuple(dims(call.args[0])) if call.args else None
    shape: list = []
    for arg in call.args:
        shape.extend(dims(arg.value if isinstance(arg, ast.Starred) else arg))
    return tuple(shape)


# ---- classes, roles, floors -------------------------------------------------------------------


@dataclass
class _Plan:
    tree: ast.Module
    bindings: list[_Binding]
    joined: frozenset[int]

    def evaluate(self, mapping: dict[Key, int]) -> tuple[dict[str, object], list[tuple[int, ...]]]:
        env = _evaluate(self.bindings, _Evaluator(mapping=mapping, joined=self.joined))
        return env, _input_shapes(self.tree, env)


def _broadcast_batches(shapes: list[tuple[int, ...]]) -> frozenset[int]:
    """Batch sizes that broadcasting lines up with another input's non-batch dim.

    KernelBench's L1/100 multiplies predictions (batch, 32768) by targets (batch,): the targets'
    batch dim meets the predictions' last dim, so batch_size must stay equal to that size.
    """
    joined = set()
    for first in shapes:
        for second in shapes:
            for i in range(1, min(len(first), len(second)) + 1):
                a, b = len(first) - i, len(second) - i
                if a == 0 and b != 0 and first[a] == second[b] > 1:
                    joined.add(first[a])
    return frozenset(joined)


def _elements(shapes: list[tuple[int, ...]]) -> int:
    return sum(math.prod(shape) for shape in shapes)


def _ints(value: object) -> list[int]:
    if type(value) is int:
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for item in value for v in _ints(item)]
    return []


def _kernel_extent(env: dict[str, object]) -> int:
    """Input extent the module's kernel/pool/window constants need (with the largest dilation)."""
    dilation = max([d for name, v in env.items() if _DILATION_NAME.search(name) for d in _ints(v) if d > 0], default=1)
    # One extent per constant (a tuple kernel_size holds one size per dimension, not a stack);
    # stacked constants (a convolution, then a pool) each take their extent off the input.
    extents = [
        (max(ks) - 1) * dilation + 1
        for name, v in env.items() if _KERNEL_NAME.search(name) and (ks := [k for k in _ints(v) if k > 0])
    ]
    return sum(e - 1 for e in extents) + 1


def _output_growth(source: str, env: dict[str, object], shapes: list[tuple[int, ...]]) -> int:
    """How many times its input a transposed convolution's output grows (stride ** dims)."""
    if not re.search(r"conv_?transpose", source, re.IGNORECASE):
        return 1
    strides = [v for name, value in env.items() if "stride" in name.lower() for v in _ints(value)]
    dims = max((len(shape) - 2 for shape in shapes), default=1)
    return max(1, max(strides, default=1)) ** max(dims, 1)


def _roles(plan: _Plan, keys: list[Key], shapes: list[tuple[int, ...]]) -> dict[Key, set[str]]:
    """For each class that may shrink: the roles of the input dims it controls (found by moving it)."""
    roles: dict[Key, set[str]] = {}
    for key in keys:
        _, moved = plan.evaluate({key: key[0] + 1009})  # a value nothing else has
        if len(moved) != len(shapes):
            continue
        for before, after in zip(shapes, moved):
            if len(before) != len(after):
                continue
            rank = len(before)
            for pos, (b, a) in enumerate(zip(before, after)):
                if b == a:
                    continue
                if pos == 0:
                    role = "batch"
                elif rank == 2:
                    role = "features"
                elif pos == 1:
                    role = "channels"
                else:
                    role = f"spatial{min(rank - 2, 3)}"
                roles.setdefault(key, set()).add(role)
    return roles


def _floor(value: int, roles: set[str], kernel_extent: int, image_floor: int) -> int:
    floor = 1
    for role in roles:
        if role == "batch":
            floor = max(floor, _BATCH_FLOOR)
        elif role == "channels":
            floor = max(floor, _CHANNEL_FLOOR)
        elif role == "features":
            floor = max(floor, _FEATURE_FLOOR)
        else:
            dims = int(role.removeprefix("spatial"))
            spatial = image_floor if dims == 2 and value >= _IMAGE_ORIGINAL else _SPATIAL_FLOOR[dims]
            floor = max(floor, spatial, kernel_extent)
    return min(floor, value)


def _code_divisors(tree: ast.Module) -> set[int]:
    """Small literals the code divides or takes a remainder by (`out_channels // 4`, `C % 8`)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod)):
            right = node.right
            if isinstance(right, ast.Constant) and type(right.value) is int and 1 < right.value <= _SMALL_VALUE:
                found.add(right.value)
    return found


def _default_ints(tree: ast.Module) -> set[int]:
    """Ints above 16 written as parameter defaults anywhere in the source."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                if isinstance(default, ast.Constant) and type(default.value) is int and default.value > _SMALL_VALUE:
                    found.add(default.value)
    return found


def _fixed_avg_pool(tree: ast.Module) -> int:
    """The largest literal kernel of an average pool in the code (MobileNet's AvgPool2d(7)), or 1."""
    largest = 1
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "AvgPool2d":
            args = node.args[:1]
        elif name == "avg_pool2d":
            args = node.args[1:2]
        else:
            continue
        args += [kw.value for kw in node.keywords if kw.arg == "kernel_size"]
        for arg in args:
            # A 2x2 pool is one of the network's downsamplings, not a fixed final pool.
            if isinstance(arg, ast.Constant) and type(arg.value) is int and arg.value > 2:
                largest = max(largest, arg.value)
    return largest


def _step(value: int, divisors: list[int]) -> int:
    step = 1
    for divisor in divisors:
        if divisor < value and value % divisor == 0:
            candidate = math.lcm(step, divisor)
            if candidate <= min(value, _MAX_STEP):
                step = candidate
    return step


def _rounded_up(value: int, step: int) -> int:
    return step * math.ceil(value / step)


def infer_small_sizes(source: str) -> dict[str, object]:
    """Module constants to rewrite (name -> small value) so the problem runs small; {} if none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    try:
        return _infer(source, tree)
    except Exception:  # noqa: BLE001 - a file this heuristic cannot follow still loads, at its real sizes
        return {}


def _infer(source: str, tree: ast.Module) -> dict[str, object]:
    bindings = _bindings(tree)
    original = _evaluate(bindings, _Evaluator())
    shapes = _input_shapes(tree, original)
    joined = _broadcast_batches(shapes)
    recorder = _Evaluator(joined=joined)
    _evaluate(bindings, recorder)
    names: dict[Key, set[str]] = {}
    for key, name in recorder.seen:
        names.setdefault(key, set()).add(name)
    plan = _Plan(tree, bindings, joined)

    divisors = sorted({
        value for (value, kind), found in names.items()
        if kind == "kept" and value > 1 and any(_DIVISOR_NAME.search(n) for n in found)
    } | _code_divisors(tree))
    movable = [key for key in names if (key[1] == "size" and key[0] > 2) or (key[1] == "batch" and key[0] > 1)]
    roles = _roles(plan, movable, shapes)
    # An input size the model also has as a parameter default (Swin's img_size=224) stays as written.
    defaults = _default_ints(tree)
    fixed = [key for key in roles if key[0] in defaults and "batch" not in roles[key]]
    movable = [key for key in movable if key not in fixed]
    for key in fixed:
        del roles[key]
    # A batch of one breaks BatchNorm on 1x1 maps (squeeze-excitation) and BatchNorm1d.
    single_batch_ok = not re.search(r"batch_?norm", source, re.IGNORECASE)
    extent = _kernel_extent(original)
    image_floor = max(_IMAGE_FLOOR, _IMAGE_DOWNSAMPLING * _fixed_avg_pool(tree))

    mapping: dict[Key, int] = {}
    floors: dict[Key, int] = {}
    steps: dict[Key, int] = {}
    for key in movable:
        value = key[0]
        # A batch size need not be a multiple of anything.
        steps[key] = step = 1 if "batch" in roles.get(key, ()) else _step(value, divisors)
        mapping[key] = value
        if value > _SMALL_VALUE:
            target = _SMALL_VALUE if value < _HUGE else _SMALL_VALUE_FOR_HUGE
            mapping[key] = min(value, _rounded_up(target, step))
        if key in roles:
            floors[key] = min(value, _rounded_up(_floor(value, roles[key], extent, image_floor), step))
            mapping[key] = max(mapping[key], floors[key])

    # Halve the sizes that feed the inputs (batch first, then the largest) until within budget;
    # a batch of one only when nothing else is left to halve.
    budget = INPUT_BUDGET // _output_growth(source, original, shapes)
    _, current = plan.evaluate(mapping)
    single_batch = not single_batch_ok
    while _elements(current) > budget:
        candidates = [k for k in floors if mapping[k] > floors[k]]
        if not candidates:
            if single_batch:
                break
            single_batch = True
            for k in floors:
                if roles[k] == {"batch"}:
                    floors[k] = 1
            continue
        batch = [k for k in candidates if "batch" in roles[k]]
        key = max(batch or candidates, key=lambda k: mapping[k])
        halved = max(floors[key], steps[key] * max(1, mapping[key] // 2 // steps[key]))
        if halved >= mapping[key]:
            floors[key] = mapping[key]
            continue
        mapping[key] = halved
        _, current = plan.evaluate(mapping)

    # Inputs over budget at their floors (images written into get_inputs): the other sizes
    # (channel counts, classes) go down to the channel floor.
    over_budget = _elements(current) > budget
    # A larger size that is not an input size keeps its relation to the input sizes.
    inputs = [k for k in roles if k[1] == "size"]
    for key in movable:
        value = key[0]
        if key in roles or key[1] != "size" or value <= _SMALL_VALUE:
            continue
        if over_budget:
            mapping[key] = min(value, _rounded_up(_CHANNEL_FLOOR, steps[key]))
        below = [mapping[k] for k in inputs if k[0] < value]
        if below and any(_BOUND_NAME.search(n) for n in names[key]):
            mapping[key] = min(value, max(mapping[key], max(below)))
        multiples = [(r, k) for r in _RATIOS for k in inputs if k[0] * r == value]
        if multiples:
            ratio, base = min(multiples)
            mapping[key] = ratio * mapping[base]

    small, _ = plan.evaluate(mapping)
    return _overrides(bindings, small)


def _overrides(bindings: list[_Binding], small: dict[str, object]) -> dict[str, object]:
    """The names to write out: those whose own expression would not give the small value."""
    plain = _Evaluator()
    env: dict[str, object] = {}
    sizes: dict[str, object] = {}
    for binding in bindings:
        name = binding.name
        if name not in small:
            env.pop(name, None)
            continue
        try:
            recomputed = plain.value(binding.expr, env, name) if binding.expr is not None else None
        except Exception:  # noqa: BLE001
            recomputed = None
        if recomputed != small[name] or type(recomputed) is not type(small[name]):
            sizes[name] = small[name]
        env[name] = small[name]
    return sizes
