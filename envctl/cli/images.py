"""envctl images: build, get, list, verify, export, import, prune."""
from __future__ import annotations

from pathlib import Path

import click
from dataclasses import asdict

from envctl.cli.core import (Ctx, exit_unless, cli, flavor_option,
                             instance_option, json_option, pass_ctx, sites_argument)
from envctl.errors import UsageError


# -- images --------------------------------------------------------------------------------------
@cli.group()
def images() -> None:
    """Get, build, verify and move the sites' images."""


@images.command("build")
@sites_argument
@flavor_option
@json_option
@pass_ctx
def images_build(ctx: Ctx, site_names: tuple[str, ...], flavor: str | None, as_json: bool) -> None:
    """Build the images envctl makes itself: the mini flavor's [default], the homepage, the front proxy."""
    from envctl.images import build_for_sites
    from envctl.render import emit_json, err_console

    names = ctx.catalog.resolve(list(site_names) or None)
    times = build_for_sites(ctx.catalog, names, flavor or "mini",
                            progress=None if as_json else (lambda m: err_console.print(m)))
    if as_json:
        emit_json({"built": {k: round(v, 2) for k, v in times.items()}})


@images.command("list")
@sites_argument
@flavor_option
@json_option
@pass_ctx
def images_list(ctx: Ctx, site_names: tuple[str, ...], flavor: str | None, as_json: bool) -> None:
    """Per site: every artifact, its sources, expected size, whether it is present, its pinned sha256."""
    from envctl.images import list_images
    from envctl.render import emit_json, table

    from envctl.lab import Lab

    flavor = flavor or "full"
    names = ctx.catalog.resolve(list(site_names) or None)
    rows = list_images(ctx.catalog, sites=names, flavor=flavor)
    lab = Lab(ctx.catalog)
    nodes = lab.data_held(names, flavor) if lab.data_travels() else {}  # a swarm: the data each node holds
    on = {r.name: sorted(n for n, held in nodes.items() if held.get(r.name)) for r in rows if r.kind == "data"}
    if as_json:
        return emit_json([{**asdict(r), **({"nodes": on[r.name]} if nodes and r.name in on else {})} for r in rows])
    table(f"{flavor} flavor artifacts", ["site", "artifact", "kind", "size", "present", "sha256", "sources"]
          + (["on nodes"] if nodes else []),
          [[r.site, r.name, r.kind, f"{r.size / 1e9:.1f} GB" if r.size else "?", "yes" if r.present else "no",
            (r.sha256 or "")[:12] or "-", ", ".join(src.split(" ")[0] for src in r.sources)]
           + ([", ".join(on.get(r.name, [])) or "-"] if nodes else []) for r in rows])


@images.command("get")
@sites_argument
@click.option("--all", "all_sites", is_flag=True)
@flavor_option
@click.option("--mirror", default=None, help="use only this mirror (e.g. cmu, archive.org, gdrive)")
@click.option("--keep-archive", is_flag=True, help="keep the downloaded tarball (resumable) instead of streaming it")
@click.option("--jobs", type=click.IntRange(1, 16), default=1, show_default=True, help="artifacts fetched in parallel")
@click.option("--registry-mirror", default=None, envvar="ENVCTL_REGISTRY_MIRROR",
              help="pull registry images through this mirror (host[:port][/prefix]); ENVCTL_REGISTRY_MIRROR")
@click.option("--dry-run", is_flag=True, help="fetch nothing: list each artifact's reference, size, digest, and the disk check")
@instance_option
@json_option
@pass_ctx
def images_get(ctx: Ctx, site_names: tuple[str, ...], all_sites: bool, flavor: str | None, mirror: str | None,
               keep_archive: bool, jobs: int, registry_mirror: str | None, dry_run: bool, instance: str,
               as_json: bool) -> None:
    """Fetch missing images and data: registry, then tarball mirrors; resumable, verified, streamed, unpacked
    (data volumes are the instance's own)."""
    from envctl.images import Options, get_images
    from envctl.render import TransferProgress, emit_json, table

    if site_names and all_sites:
        raise UsageError("name sites or pass --all, not both", "e.g. 'envctl images get shopping' or '--all'")
    names = ctx.catalog.resolve(list(site_names) or None, all_sites=all_sites)
    ctx.catalog.require_flavor(site_names, flavor or "full")
    if mirror is not None:
        known = ctx.catalog.mirrors()
        if mirror not in known:
            raise UsageError(f"unknown mirror '{mirror}'", f"choose one of {', '.join(known)}")
    if registry_mirror is not None:
        from envctl.validate import validate_registry_mirror

        validate_registry_mirror(registry_mirror)
    if dry_run:
        return _images_get_plan(ctx, names, flavor or "full", mirror, keep_archive, registry_mirror, instance, as_json)
    from envctl.lab import Lab

    travels = Lab(ctx.catalog, instance=instance).data_travels()  # a swarm: each node fetches its sites' data
    with TransferProgress(json_events=as_json) as progress:
        results = get_images(ctx.catalog, names, flavor=flavor or "full", mirror=mirror, keep_archive=keep_archive,
                             jobs=jobs, progress=progress,
                             options=Options(instance=instance, registry_mirror=registry_mirror), data=not travels)
    if as_json:
        emit_json([asdict(r) for r in results])
    else:
        table(None, ["site", "artifact", "result", "detail"],
              [[r.site, r.name, r.action, (r.error or "")[:100]] for r in results])
    exit_unless(not any(r.action == "failed" for r in results))


def _images_get_plan(ctx: Ctx, names: list[str], flavor: str, mirror: str | None, keep_archive: bool,
                     registry_mirror: str | None, instance: str, as_json: bool) -> None:
    from envctl.images import Options, plan_get
    from envctl.render import emit_json, table

    plan = plan_get(ctx.catalog, names, flavor=flavor, mirror=mirror, keep_archive=keep_archive,
                    options=Options(instance=instance, registry_mirror=registry_mirror))
    if as_json:
        emit_json({"flavor": plan.flavor, "artifacts": [asdict(a) for a in plan.artifacts], "disk": plan.disk})
    else:
        gb = lambda n: f"{n / 1e9:.1f} GB" if n else "?"  # noqa: E731
        table(f"images get --flavor {flavor} (dry run: nothing fetched)",
              ["site", "artifact", "action", "reference", "size", "loaded", "pinned"],
              [[a.site, a.name, a.action, a.reference or "-", gb(a.size), gb(a.loaded_size),
                a.digest.split("@")[-1][:19] if a.digest else
                ("sha256, catalog" if a.pinned_in == "catalog" else "sha256, lock") if a.pinned_in else "by the first get"]
               for a in plan.artifacts])
        for d in plan.disk:
            click.echo(f"{d['path']}: needs {d['need'] / 1e9:.1f} GB, {d['free'] / 1e9:.1f} GB free"
                       f"{'' if d['ok'] else ' - NOT ENOUGH'}")
    exit_unless(plan.fits)


@images.command("verify")
@sites_argument
@flavor_option
@instance_option
@json_option
@pass_ctx
def images_verify(ctx: Ctx, site_names: tuple[str, ...], flavor: str | None, instance: str, as_json: bool) -> None:
    """Re-check present artifacts against their pins (size, sha256, registry digest) and their extracts."""
    from envctl.images import Options, verify_images
    from envctl.render import emit_json, table

    res = verify_images(ctx.catalog, ctx.catalog.resolve(list(site_names) or None), flavor=flavor or "full",
                        options=Options(instance=instance))
    if as_json:
        emit_json([asdict(r) for r in res])
    else:
        table(None, ["site", "artifact", "ok", "detail"], [[r.site, r.name, "ok" if r.ok else "FAIL", r.detail] for r in res])
    exit_unless(all(r.ok for r in res))


@images.command("export")
@click.argument("site")
@click.argument("file", type=click.Path(dir_okay=False))
@flavor_option
@json_option
@pass_ctx
def images_export(ctx: Ctx, site: str, file: str, flavor: str | None, as_json: bool) -> None:
    """Save SITE's image(s) to FILE (plus FILE.sha256) to move them to another host."""
    from envctl.images import export_image
    from envctl.locks import output_file
    from envctl.render import emit_json

    tag = ctx.catalog.images_of(site, flavor or "full")[0]
    output_file(file, "FILE")  # a directory, a FIFO, or under a regular file: one line before Docker is asked
    output_file(f"{file}.sha256", "FILE.sha256")
    out = export_image(tag, Path(file))
    if as_json:
        return emit_json(asdict(out))
    click.echo(f"exported {tag} to {out.path} ({out.size / 1e6:.1f} MB, sha256 {out.sha256[:12]})")


@images.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--tag", default=None, help="tag to give the loaded image")
@json_option
def images_import(file: str, tag: str | None, as_json: bool) -> None:
    """Load an image file written by 'images export' (checked against FILE.sha256 when present)."""
    from envctl.images import import_image
    from envctl.render import emit_json
    from envctl.validate import validate_image_ref

    if tag is not None:
        validate_image_ref(tag, "--tag")
    res = import_image(Path(file), tag=tag)
    if as_json:
        return emit_json(asdict(res))
    click.echo(f"loaded {', '.join(res.tags) or res.image_id}")


@images.command("prune")
@click.option("--dry-run", is_flag=True)
@json_option
def images_prune(dry_run: bool, as_json: bool) -> None:
    """Remove envctl's partial downloads and the dangling images it made."""
    from envctl.images import prune
    from envctl.render import emit_json

    res = prune(dry_run=dry_run)
    if as_json:
        return emit_json(asdict(res))
    click.echo(f"{'would remove' if dry_run else 'removed'} {len(res.files)} files ({res.freed / 1e6:.1f} MB) "
               f"and {len(res.images)} images")


