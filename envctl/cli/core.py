"""envctl command line: thin Click commands that call the library (``envctl.Lab`` and the public
``envctl.images`` / ``envctl.cloud`` / ``envctl.smoke`` APIs) and render the result.

Errors are handled once, at the root group: every ``EnvctlError`` becomes one line
``error: ... ; hint`` and its exit code (1 runtime, 2 usage); anything unexpected prints one line
and writes the traceback to a debug log. Ctrl-C (exit 130) and SIGTERM (exit 143) unwind the same way
(:func:`sigterm_unwinds`). ``--instance``, ``--flavor`` and ``--json`` are declared
once below and shared by every command that takes them.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

import click

from envctl import __version__
from envctl.errors import EnvctlError, Terminated, UsageError

if TYPE_CHECKING:
    from envctl.catalog import Catalog
    from envctl.lab import Lab


class Ctx:
    """Built once in the root group; commands receive it with ``pass_ctx``."""

    def __init__(self, catalog_path: str | None) -> None:
        self.catalog_path = catalog_path
        self._catalog: Catalog | None = None

    @property
    def catalog(self) -> "Catalog":  # lazy, so --help and --version never parse YAML
        if self._catalog is None:
            from envctl.catalog import load_catalog

            self._catalog = load_catalog(self.catalog_path)
        return self._catalog

    def lab(self, instance: str = "default", auth_dir: str | None = None) -> "Lab":
        from envctl.lab import Lab

        return Lab(self.catalog, catalog_path=self.catalog_path, instance=instance, auth_dir=auth_dir)


pass_ctx = click.make_pass_decorator(Ctx)


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While a command runs, SIGTERM raises :class:`~envctl.errors.Terminated` (a KeyboardInterrupt) in the
    main thread, so a script's ``kill``, a CI runner's or a service manager's stop unwinds the command as
    Ctrl-C does instead of killing it mid-step. Only the first SIGTERM raises: a second one does not break
    the unwinding of the first (SIGKILL still ends the process). A SIGTERM that the caller ignores stays
    ignored; the previous handler is put back afterwards (a command run in-process, e.g. by a test)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    fired: list[int] = []

    def on_term(_signum: int, _frame: object) -> None:
        if not fired:
            fired.append(1)
            raise Terminated()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class EnvctlGroup(click.Group):
    """The one boundary where errors become one line on stderr and an exit code (1 runtime, 2 usage)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        with sigterm_unwinds():
            try:
                super().main(*args, **kwargs)
            except click.ClickException as exc:  # usage errors: one line, not click's three
                cmd = exc.ctx.command_path if isinstance(exc, click.UsageError) and exc.ctx else "envctl"
                click.echo(f"error: {exc.format_message()} (see '{cmd} --help')", err=True)
                sys.exit(exc.exit_code)
            except click.Abort:
                click.echo("error: aborted", err=True)
                sys.exit(1)
            sys.exit(0)

    def invoke(self, ctx: click.Context) -> Any:
        rest = [*getattr(ctx, "_protected_args", ()), *ctx.args]  # the subcommand's words, before they are parsed
        ctx.meta["envctl.help"] = bool({"-h", "--help"} & set(rest))
        try:
            return super().invoke(ctx)
        except EnvctlError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated): the same unwinding, the same promise
            how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
            click.echo(f"{how}; nothing half-done is kept as ready — run the command again to finish", err=True)
            sys.exit(143 if isinstance(exc, Terminated) else 130)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the one boundary for unexpected errors
            if "Cannot connect to the Docker daemon" in str(exc):  # the engine went away mid-command
                click.echo("error: the Docker engine stopped answering; start it (sudo scripts/docker-engine.sh) "
                           "and run the command again: the next command repairs what was half-done", err=True)
                sys.exit(1)
            from envctl.locks import disk_full, is_disk_full, write_debug_log

            if is_disk_full(exc):  # a write no module turned into its own message: still one line naming the place
                assert isinstance(exc, OSError)
                click.echo(f"error: {disk_full(exc.filename or os.getcwd())}", err=True)
                sys.exit(1)

            log = write_debug_log(traceback.format_exc())  # <state dir>/debug.log, 0600, no symlinks
            where = f"traceback in {log}" if log else "no debug log could be written"
            click.echo(f"error: unexpected {type(exc).__name__}: {exc} ({where}; please report it)", err=True)
            sys.exit(1)


# -- shared options ----------------------------------------------------------------------------------
def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="machine-readable output")(fn)


def _check_instance(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    from envctl.validate import validate_instance_name

    try:
        return validate_instance_name(value)
    except UsageError as exc:
        raise click.BadParameter(str(exc)) from None


def instance_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--instance", "-i", default=lambda: os.environ.get("ENVCTL_INSTANCE", "default"),
                        show_default="default", callback=_check_instance,
                        help="instance name (ENVCTL_INSTANCE)")(fn)


def _check_flavor(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    known = ctx.find_object(Ctx).catalog.flavors()  # type: ignore[union-attr]
    if value not in known:
        raise click.BadParameter(f"unknown flavor '{value}'; choose one of {', '.join(known)}")
    return value


def flavor_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--flavor", default=None, callback=_check_flavor,
                        help="full (upstream images) or mini (envctl's stand-ins) [full, or the running instance's]"
                        )(fn)


def finite(_ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """click.FloatRange lets NaN through (every comparison with it is False)."""
    if value is not None and value != value:
        raise click.BadParameter(f"{value} is not a number")
    return value


def check_region(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--region / $AWS_REGION: a region name, checked before any AWS call (names the variable when it came from it)."""
    from envctl.validate import validate_region

    if value is None:
        return None
    source = ctx.get_parameter_source(param.name or "region")
    return validate_region(value, "AWS_REGION" if source == click.core.ParameterSource.ENVIRONMENT else "--region")


def auth_dir_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--auth-dir", default=None, help="where login state files go [.auth]")(fn)


def sites_argument(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.argument("site_names", nargs=-1, metavar="[SITE]...")(fn)


def named_sites(ctx: Ctx, names: tuple[str, ...]) -> list[str] | None:
    """Named sites, checked against the catalog (a typo is a usage error with a suggestion)."""
    return ctx.catalog.resolve(list(names)) if names else None


def exit_unless(ok: bool) -> None:
    if not ok:
        sys.exit(1)


@click.group(cls=EnvctlGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envctl")
@click.option("--catalog", type=click.Path(dir_okay=False), envvar="ENVCTL_CATALOG",
              help="site catalog YAML (default: the built-in one; env ENVCTL_CATALOG)")
@click.pass_context
def cli(ctx: click.Context, catalog: str | None) -> None:
    """Provision, reset and verify the WebArena / VisualWebArena sites for web-agent evaluation."""
    ctx.obj = Ctx(catalog)
    # garbage in an ENVCTL_* variable, or a state/data directory that is a file, is refused here in one
    # line before anything runs; 'doctor' reports every variable instead, and help is always shown
    if ctx.invoked_subcommand != "doctor" and not ctx.meta.get("envctl.help"):
        from envctl.locks import check_environment

        check_environment()

