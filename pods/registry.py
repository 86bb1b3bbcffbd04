"""Name -> component registries, so configs pick components by name and a lookup error lists the choices.

Each stage package keeps one (selectors, prefilters, rewards, rollout backends) and imports all of its
modules on import (`import_submodules`), so a new file in the package registers itself; pods.update keeps the
advantage estimators' and the losses' in the modules that define pods' own. Code outside the
package is named in the config's `plugins:` list and imported before the config is checked
(`load_plugins`). An entry may bring its own settings, a dataclass: `register("greso", settings=GresoConfig)`;
the config then holds them under the group, in a section named after the entry (`prefilter.greso.p_init`),
checked and typed with the rest of the config before anything loads (pods/components.py). Behaviour the rest
of pods must know about an entry is a trait declared with it, never a test of its name:
`register_selector("none", keeps_all=True)` (the selector trains on every rollout: m must equal n).

One rule for how an entry gets its settings: its own knobs as keyword arguments (the fields of its dataclass,
`prefilter.greso.p_init` -> `p_init=`), beside what the loop hands it, by name:

    selector   fn(rewards, m, generator, lengths=..., tokens=..., correct=..., prompt_ids=..., **knobs)
    reward     fn(completions, answers, prompts=..., grader=..., <row fields>=..., **knobs)
    prefilter  cls(seed=..., **knobs)
    backend    cls.from_config(settings, model=..., tokenizer=..., device=..., timer=..., **knobs)
    advantage  fn(rewards, all_rewards=..., **knobs)
    loss       fn(logp, old_logp, adv, mask, epsilon=..., ref_logp=..., beta=..., num_tokens=..., ..., **knobs)

(a selector, reward, advantage or loss gets the context it names, all of it with **kw: `accepted`;
`settings`, a backend's context, is what generation depends on: the rollout, model and hardware groups; its
class-level hooks, run on the config before anything is built, read the same knobs as `settings.rollout.own()`.)
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import pkgutil
import traceback
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from typing import Generic, TypeVar

from pods.errors import CheckpointError, ConfigError, IntegrityError, PluginError, RunError

T = TypeVar("T")


class Registry(Generic[T], dict):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.settings: dict[str, type] = {}  # name -> the entry's settings dataclass, if it has one
        self.traits: dict[str, dict] = {}  # name -> the traits declared with the entry

    def register(self, name: str, settings: type | None = None, **traits) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self and self[name] is not obj:
                raise ConfigError(
                    f"{self.kind} {name!r} is already registered (by {_origin(self[name])}); "
                    f"{_origin(obj)} registers another under that name: give it a name of its own"
                )
            self[name] = obj
            if settings is not None:
                self.settings[name] = settings
            self.traits[name] = traits
            return obj

        return deco

    def trait(self, name: str, trait: str, default=False):
        """The value of `trait` declared with entry `name` (`default` when it declared none)."""
        return self.traits.get(name, {}).get(trait, default)

    def get_or_raise(self, name: str, key: str | None = None) -> T:
        if name not in self:
            where = f"{key}={name!r}" if key else f"{self.kind} {name!r}"
            raise KeyError(f"{where} is not registered; valid {self.kind} names: {', '.join(sorted(self))}")
        return self[name]


class ContractDeprecationWarning(FutureWarning):
    """A component written for an earlier contract: it still runs, and this says what to change. A
    FutureWarning, so a run shows it (a DeprecationWarning is hidden outside __main__)."""


def knobs(settings) -> dict:
    """A component's own settings (its registry entry's dataclass, or None) as keyword arguments."""
    return dataclasses.asdict(settings) if settings is not None else {}


def takes_keywords(fn: Callable, names) -> bool:
    """Whether `fn` accepts every one of `names` as a keyword argument (by name, or through `**kw`)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True  # a builtin: nothing to read
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return True
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return set(names) <= named


def accepted(fn: Callable, kw: dict) -> dict:
    """The keywords of `kw` that `fn` takes: all of them with a `**kw` parameter, else those it names (what
    the loop hands a component by name: a reward's `prompts`, a selector's `lengths`)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C function: pass everything
        return kw
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return kw
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in kw.items() if k in named}


def _origin(obj) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


def import_submodules(package: str) -> None:
    """Import every module of `package` (not its subpackages' modules), so each registers what it defines.
    A module whose import raises (a file added to the package with a bug) is one ConfigError line."""
    pkg = importlib.import_module(package)
    for info in pkgutil.iter_modules(pkg.__path__, f"{package}."):
        try:
            importlib.import_module(info.name)
        except ConfigError:
            raise
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a module's import may raise anything
            raise ConfigError(f"{info.name} failed to import: {raised(e, info.name)}") from None


def load_plugins(modules: Iterable[str]) -> None:
    """Import the config's `plugins:` modules (dotted names on sys.path); their decorators register them.
    A module that is not found, or whose import raises anything (a syntax error, a bug, a name registered
    twice, a sys.exit), is one ConfigError line naming the module, the error and where it was raised."""
    modules = list(modules)
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and name != e.name and not name.startswith(e.name + "."):  # the plugin's own import
                raise ConfigError(f"plugins: {name!r} failed to import: {raised(e, name)}") from None
            raise ConfigError(
                f"plugins={modules}: cannot import {name!r} ({e}); is it on PYTHONPATH?"
            ) from None
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a plugin's import may raise anything
            raise ConfigError(f"plugins: {name!r} failed to import: {raised(e, name)}") from None


# what a component's call may raise that already names what broke: passed on as it is
NAMED = (PluginError, IntegrityError, RunError, ConfigError, CheckpointError)


@contextmanager
def calling(kind: str, name: str, fn=None, what: str = ""):
    """Around the loop's call of component `name` (of registry `kind`: reward, selector, prefilter, advantage,
    loss; `what`: the method, ` keep()`): an exception it raises is one PluginError line naming it, the error
    and the line of the component's own file that raised it (`fn`'s module), not a traceback. A stop
    (StopRequested, KeyboardInterrupt: BaseExceptions) and errors that already name their cause pass."""
    try:
        yield
    except NAMED:
        raise
    except Exception as e:  # noqa: BLE001 - a component's code may raise anything
        module = getattr(fn, "__module__", None)
        raise PluginError(f"{kind} {name!r}{what} raised {raised(e, module)}") from e


def raised(e: BaseException, module: str | None = None) -> str:
    """`Type: message (file:line)`: the message's first line and where it was raised: in `module`'s own file
    when the traceback passes there (a plugin's line, not the library it called), else the innermost frame
    outside importlib."""
    text = str(e).strip()
    msg = f": {text.splitlines()[0]}" if text else ""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<frozen")]
    origin = _origin_file(module)
    own = [f for f in frames if origin and f.filename == origin]
    if isinstance(e, SyntaxError) and e.filename:
        where = f" ({e.filename}:{e.lineno})"
    else:
        frame = (own or frames or [None])[-1]
        where = f" ({frame.filename}:{frame.lineno})" if frame else ""
    return f"{type(e).__name__}{msg}{where}"


def _origin_file(module: str | None) -> str | None:
    if not module:
        return None
    try:
        spec = importlib.util.find_spec(module)
    except Exception:  # noqa: BLE001 - a broken parent package: no file to name
        return None
    return spec.origin if spec else None
