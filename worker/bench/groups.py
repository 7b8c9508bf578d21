"""The benchmark's named groups: a drafter plus a verification policy (or a peer loop)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from specd import SpecdError
from specd.api.policy import Policy, PolicyMode


@dataclass(frozen=True)
class Group:
    name: str
    drafter: str  # engine drafter, or "hf" for transformers' own loops
    mode: PolicyMode | None = None  # None for peers
    peer: str | None = None  # "generate" | "assisted-draft" | "assisted-lookup"
    lookup: bool = False  # prompt lookup beside the drafter (EngineConfig.prompt_lookup)
    sampling: str = "greedy"  # a SAMPLING variant (``with_sampling``)
    k: int | None = None  # its own draft length (``name:kN``); None: the run's --k
    survival_floor: float | None = None  # its own (``name:fX``); None: the policy's default

    def policy(self, k: int) -> Policy:
        assert self.mode is not None
        k = self.draft_length(k)
        floor = {} if self.survival_floor is None else {"survival_floor": self.survival_floor}
        return Policy(mode=self.mode, k_max=k, fixed_length=k, max_verify=k, **floor)

    def draft_length(self, k: int) -> int:
        return self.k if self.k is not None else k

    @property
    def base(self) -> str:
        """The group's name without its sampling variant (groups sharing it share an engine)."""
        return self.name.split("@", 1)[0]

    @property
    def temperature(self) -> float:
        return parse_sampling(self.sampling)[0]

    @property
    def seeded(self) -> bool:
        return parse_sampling(self.sampling)[1]


def kind_of(name: str) -> str:
    """A group's name without its draft length or sampling variant:
    "semi-ar-fixed:k2@t0.7" -> "semi-ar-fixed"."""
    return name.split("@", 1)[0].split(":", 1)[0]


SEED_BASE = 1000  # seeded variants: prompt i carries seed SEED_BASE + i


def parse_sampling(variant: str) -> tuple[float, bool]:
    """"greedy" -> (0, False); "t0.7" -> (0.7, False): unseeded, the standard rule;
    "t0.7-seeded" -> (0.7, True): seeded, the coupled rule (verifier.verify_coupled)."""
    if variant == "greedy":
        return 0.0, False
    body, seeded = (variant[:-7], True) if variant.endswith("-seeded") else (variant, False)
    try:
        if not body.startswith("t"):
            raise ValueError(body)
        temperature = float(body[1:])
    except ValueError:
        raise SpecdError(f"--sampling: {variant!r} is not greedy, tT or tT-seeded "
                         "(e.g. t0.7, t1.0-seeded)") from None
    if not 0.0 < temperature <= 2.0:
        raise SpecdError(f"--sampling: temperature in (0, 2] required, got {variant!r}")
    return temperature, seeded


def with_sampling(groups: list[Group], variants: list[str]) -> list[Group]:
    """Every engine group once per sampling variant, named ``<group>@<variant>`` (peers:
    greedy only). ``["greedy"]`` leaves the groups as they are."""
    for v in variants:
        parse_sampling(v)
    if variants == ["greedy"]:
        return groups
    out = [g for g in groups if g.peer]
    for v in variants:
        out += [dataclasses.replace(g, name=f"{g.name}@{v}", sampling=v)
                for g in groups if not g.peer]
    return out


# a second plain engine: plain against itself in the same run, the run's noise floor
# (engine_bench.comparisons reports it beside each scheduled group's ratio)
TWIN = "plain-twin"

GROUPS: dict[str, Group] = {g.name: g for g in (
    Group("plain", "none", "plain"),
    Group(TWIN, "none", "plain"),
    Group("ngram", "ngram", "fixed"),
    Group("parallel-fixed", "parallel", "fixed"),
    Group("semi-ar-fixed", "semi-ar", "fixed"),
    Group("semi-ar-scheduled", "semi-ar", "scheduled"),
    Group("parallel-scheduled", "parallel", "scheduled"),
    Group("semi-ar-lookup-fixed", "semi-ar", "fixed", lookup=True),
    Group("semi-ar-lookup-scheduled", "semi-ar", "scheduled", lookup=True),
    Group("draft-model", "draft-model", "fixed"),
    Group("hf-generate", "hf", peer="generate"),
    Group("hf-assisted", "hf", peer="assisted-draft"),
    Group("hf-lookup", "hf", peer="assisted-lookup"),
)}

DEFAULT_GROUPS = ("plain", "ngram", "parallel-fixed", "semi-ar-fixed", "semi-ar-scheduled",
                  "semi-ar-lookup-scheduled", "draft-model", "hf-generate", "hf-assisted",
                  "hf-lookup")


def parse_groups(text: str) -> list[Group]:
    """Named groups, each optionally with its own settings after colons: a draft length
    ("semi-ar-fixed:k2" runs semi-ar-fixed at K=2 beside groups at the run's --k, so K is
    compared in one run) and, for scheduled groups, a survival floor ("semi-ar-scheduled:f0.05"
    beside "semi-ar-scheduled": the floor compared in one run)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if kind_of(n) not in GROUPS]
    if unknown or not names:
        raise SpecdError(f"unknown group(s) {', '.join(unknown) or '(none)'}: "
                         f"choose from {', '.join(GROUPS)} (optionally with :kN, :fX)")
    if len(set(names)) != len(names):
        raise SpecdError(f"--groups names a group twice: {text!r}")
    if "plain" not in names:  # match_plain needs the reference outputs
        names.insert(0, "plain")
    return [_with_options(GROUPS[kind_of(n)], n) for n in names]


def _with_options(group: Group, name: str) -> Group:
    """``group`` named ``name``, with the settings its ``:kN`` / ``:fX`` suffixes give."""
    options = name.split(":")[1:]
    if not options:
        return group
    if group.mode in (None, "plain"):
        raise SpecdError(f"--groups: {name!r}: only drafting groups take :kN or :fX")
    if len({option[:1] for option in options}) != len(options):  # else the last one wins unsaid
        raise SpecdError(f"--groups: {name!r} gives a setting twice")
    out = dataclasses.replace(group, name=name)
    for option in options:
        if option.startswith("k") and option[1:].isdigit() and int(option[1:]) >= 1:
            out = dataclasses.replace(out, k=int(option[1:]))
        elif option.startswith("f") and group.mode == "scheduled" and _unit(option[1:]):
            out = dataclasses.replace(out, survival_floor=float(option[1:]))
        else:
            raise SpecdError(f"--groups: {name!r}: {option!r} is neither a draft length :kN "
                             "(N >= 1, e.g. semi-ar-fixed:k2) nor, for a scheduled group, a "
                             "survival floor :fX (0 <= X <= 1, e.g. semi-ar-scheduled:f0.05)")
    return out


def _unit(text: str) -> bool:
    try:
        return 0.0 <= float(text) <= 1.0
    except ValueError:
        return False


def parse_concurrency(text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError as exc:
        raise SpecdError(f"--concurrency must be integers like 1,4,16: {text!r}") from exc
    if not values or values[0] < 1:
        raise SpecdError("--concurrency values must be >= 1")
    return values
