"""The FastAPI application: `create_app(settings)` builds everything; the lifespan opens the
database (migrated) and the store, and closes them on shutdown."""

from __future__ import annotations

import gc
import importlib.metadata
import logging
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.to_thread
from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import Scope

from app.allocator import HeapTrimmer
from app.body_limit import BodyLimitMiddleware, ByteBudget
from app.config import Settings
from app.content_type import JsonContentTypeMiddleware
from app.db import make_engine, migrate, session_factory
from app.errors import error_response, install_error_handlers
from app.grpc.server import front_for
from app.headers import SecurityHeadersMiddleware
from app.lingering_close import LingeringCloseMiddleware
from app.pages import admin as admin_page
from app.pages import analytics as analytics_page
from app.pages import audit as audit_page
from app.pages import client_credentials as client_credentials_page
from app.pages import clients as clients_page
from app.pages import cluster as cluster_page
from app.pages import config as config_page
from app.pages import content_search as content_search_page
from app.pages import dashboard as dashboard_page
from app.pages import dead_letters as dead_letters_page
from app.pages import groups as groups_page
from app.pages import message as message_page
from app.pages import redrive as redrive_page
from app.pages import search as search_page
from app.pages import timeline as timeline_page
from app.pages import topics as topics_page
from app.read_only import refuse_writes_when_read_only
from app.render import STATIC_PREFIX, Renderer, project_dir
from app.request_limits import body_limit
from app.routes import accounts as accounts_routes
from app.routes import audit as audit_routes
from app.routes import auth as auth_routes
from app.routes import client_credentials as client_credential_routes
from app.routes import clients as clients_routes
from app.routes import clusters as cluster_routes
from app.routes import config as config_routes
from app.routes import content_search as content_search_routes
from app.routes import dead_letters as dead_letter_routes
from app.routes import docs, groups, health, lookup, messages, queue_view, receive, resend, timeline, topics
from app.routes import metrics as metrics_routes
from app.routes import pipeline_runs as pipeline_routes
from app.routes import redrive as redrive_routes
from app.security import CrossOriginGuardMiddleware, PrincipalCache, SessionCookieMiddleware
from app.services import accounts, client_credentials, offset_reset, pipeline_runs
from app.services import config as config_service
from app.services import groups as groups_service
from app.services import redrive as redrive_service
from app.services import resend as resend_service
from app.services import topics as topics_service
from app.services.client_secret_key import SecretKeyError, load_cipher
from app.services.client_sessions import ClientSessions
from app.services.content_search import ContentSearches
from app.services.credential_verifier import CredentialVerifier
from app.services.dead_letters import DeadLetterCache
from app.services.demo import DemoWorkload
from app.services.demo_clients import DemoClients
from app.services.flow import PutGate
from app.services.login_limit import LoginLimiter
from app.services.metrics import metrics_registry
from app.services.password_checks import PasswordCheckPool
from app.services.pipeline_command import PipelineSetup, job_environment
from app.services.pipeline_runner import PipelineRunner
from app.services.put_batcher import PutBatcher
from app.services.rates import RateSampler
from app.services.redrive import RedriveRunner
from app.services.warm_spark import WARM_DIR_NAME, WarmSettings, WarmSpark
from app.twin import JsonTwinMiddleware
from backend.embedded import EmbeddedBackend
from backend.protocol import Backend, BackendUnavailable
from cluster.backend import ClusterBackend, ClusterSettings
from store.clock import Clock, SystemClock
from store.errors import DiskFullError
from store.message_store import MessageStore, StoreConfig

log = logging.getLogger("mqlens.app")


@dataclass
class _Resources:
    engine: Engine
    sessions: sessionmaker[Session]
    store: MessageStore | None  # None on a live cluster
    backend: Backend
    session_secret: str
    verifier: CredentialVerifier
    pipeline: PipelineRunner
    demo: DemoWorkload | None = None
    redrive: RedriveRunner | None = None


def _set_up_accounts(settings: Settings, sessions: sessionmaker[Session], clock: Clock) -> str:
    """The bootstrap admin token, the first admin on a fresh database, the demo's users; returns
    the session signing key."""
    if settings.bootstrap_admin_token is not None:
        accounts.ensure_bootstrap_token(sessions, clock, settings.bootstrap_admin_token.get_secret_value())
    given = settings.admin_password.get_secret_value() if settings.admin_password is not None else None
    password = accounts.ensure_first_admin(sessions, clock, given)
    if password is not None:
        where = f"http://{settings.host if settings.host not in ('0.0.0.0', '::') else '127.0.0.1'}:{settings.port}"
        shown = "the password from MQLENS_ADMIN_PASSWORD" if given else f"password {password}"
        log.warning("first start: created the user %s (admin). Sign in at %s/login as %s with %s "
                    "(shown once: add your own users under Admin, then change or disable this one)",
                    accounts.FIRST_ADMIN_NAME, where, accounts.FIRST_ADMIN_NAME, shown)
    if settings.demo:
        for name in accounts.ensure_demo_users(sessions, clock):
            log.info("demo: created user %s with password %s", name, accounts.DEMO_PASSWORD)
    return accounts.server_secret(sessions)


def _client_verifier(settings: Settings, sessions: sessionmaker[Session], clock: Clock) -> CredentialVerifier:
    """The gRPC front's signature checks, with every client secret decrypted now: a server key
    that cannot read them stops the start here, saying so."""
    key = settings.client_secret_key.get_secret_value() if settings.client_secret_key is not None else None
    try:
        cipher = load_cipher(key, settings.data_dir, lambda: client_credentials.any_stored(sessions))
        verifier = CredentialVerifier(sessions, clock, cipher, settings.grpc_allows_anonymous(),
                                      settings.grpc_max_skew_ms)
        verifier.reload(strict=True)
    except SecretKeyError as exc:
        log.error("cannot start: %s", exc)
        raise
    if verifier.allow_anonymous and settings.listens_beyond_loopback():
        log.warning("gRPC clients without credentials are accepted from anyone who reaches %s "
                    "(MQLENS_GRPC_ANONYMOUS=true)", settings.host)
    else:
        log.info("gRPC clients without credentials are %s", "accepted" if verifier.allow_anonymous else "refused")
    return verifier


def _cluster_backend(settings: Settings) -> ClusterBackend:
    secret = settings.cluster_secret_key.get_secret_value() if settings.cluster_secret_key is not None else None
    return ClusterBackend(ClusterSettings(
        settings.name_servers(), settings.cluster_access_key, secret,
        request_timeout_s=settings.cluster_request_timeout_ms / 1000, deadline_s=settings.cluster_deadline_ms / 1000))


def _operator_database(settings: Settings, clock: Clock) -> tuple[Engine, sessionmaker[Session], str,
                                                                 CredentialVerifier]:
    """The migrated operator database, its accounts set up, and the gRPC front's credential verifier."""
    assert settings.database_url is not None
    migrate(settings.database_url)
    engine = make_engine(settings.database_url)
    try:
        sessions = session_factory(engine)
        return engine, sessions, _set_up_accounts(settings, sessions, clock), _client_verifier(settings, sessions,
                                                                                             clock)
    except BaseException:
        engine.dispose()
        raise


def _warm_spark(settings: Settings) -> WarmSpark | None:
    master = settings.warm_spark_master()
    if master is None:
        return None
    setup = PipelineSetup.from_settings(settings)
    return WarmSpark(settings.data_dir.resolve() / WARM_DIR_NAME, setup.command,
                     WarmSettings(master, settings.pipeline_warm_memory, settings.pipeline_warm_idle_s),
                     job_environment(), os.getpid())


def _started_pipeline(settings: Settings, sessions: sessionmaker[Session], clock: Clock) -> PipelineRunner:
    warm = _warm_spark(settings)
    pipeline = PipelineRunner(sessions, clock, warm=warm)
    for line in pipeline_runs.reconcile_runs(pipeline, sessions, clock):
        log.info("start-up: %s", line)
    pipeline.start()
    if warm is not None and settings.pipeline_warm_at_start:
        try:
            warm.start()
        except OSError as exc:  # the first job tries again, and says why when it cannot either
            log.warning("start-up: the warm Spark could not start: %s", exc)
    return pipeline


def _start_on_cluster(settings: Settings, clock: Clock) -> _Resources:
    """The operator database and a live cluster's backend; no store, so no store's workers."""
    engine, sessions, session_secret, verifier = _operator_database(settings, clock)
    try:
        pipeline = _started_pipeline(settings, sessions, clock)
    except BaseException:
        engine.dispose()
        raise
    backend = _cluster_backend(settings)
    try:
        for line in resend_service.reconcile_resends(backend, sessions):
            log.info("start-up: %s", line)
    except BackendUnavailable as exc:
        log.warning("start-up: resends a crash left pending stay pending (the next start settles them): %s", exc)
    try:
        for line in redrive_service.reconcile_job_creation(sessions):
            log.info("start-up: %s", line)
        redrive = RedriveRunner(backend, sessions, clock).start()
    except BaseException:
        pipeline.stop()
        backend.close()
        engine.dispose()
        raise
    return _Resources(engine, sessions, None, backend, session_secret, verifier, pipeline, redrive=redrive)


def _start(settings: Settings, clock: Clock) -> _Resources:
    if settings.namesrv is not None:
        return _start_on_cluster(settings, clock)
    assert settings.store_dir is not None
    engine, sessions, session_secret, verifier = _operator_database(settings, clock)
    try:
        # The delay level table: the store's own file, else the one configured, else inferred.
        # A table the operators recorded that the file lacks (a crash cut its write) is applied
        # after the store opens, from where the log ends, so earlier messages keep theirs.
        store_config = StoreConfig(geometry=settings.geometry(), flush=settings.flush,
                                   schedule_interval_ms=0 if settings.read_only else settings.schedule_interval_ms,
                                   delay_levels=settings.delay_levels)
        store = MessageStore.open(settings.store_dir, store_config, clock=clock, read_only=settings.read_only)
    except BaseException:
        engine.dispose()
        raise
    try:
        # Pipeline jobs read the store and write only to the data directory: they run read-only too.
        pipeline = _started_pipeline(settings, sessions, clock)
    except BaseException:
        store.close()
        engine.dispose()
        raise
    if settings.read_only:
        log.info("serving the store in %s read-only", settings.store_dir)
        return _Resources(engine, sessions, store, EmbeddedBackend(store, _version()), session_secret, verifier,
                          pipeline)
    redrive = None
    try:
        for line in config_service.reconcile_delay_levels(store, sessions):
            log.info("start-up: %s", line)
        for line in [*resend_service.reconcile_resends(store, sessions),
                     *groups_service.reconcile_group_updates(store, sessions),
                     *topics_service.reconcile_topic_updates(store, sessions),
                     *offset_reset.reconcile_resets(store, sessions)]:
            log.info("start-up: %s", line)
        for line in redrive_service.reconcile_job_creation(sessions):
            log.info("start-up: %s", line)
        redrive = RedriveRunner(store, sessions, clock).start()
        demo = DemoWorkload(store).start() if settings.demo else None
    except BaseException:
        if redrive is not None:
            redrive.stop()
        pipeline.stop()
        store.close()
        engine.dispose()
        raise
    return _Resources(engine, sessions, store, EmbeddedBackend(store, _version()), session_secret, verifier, pipeline,
                      demo, redrive)


def _stop(resources: _Resources) -> None:
    try:
        resources.verifier.stop()
        resources.pipeline.stop()  # the jobs go on: the next start follows them again
        if resources.redrive is not None:
            resources.redrive.stop()
        if resources.demo is not None:
            resources.demo.stop()
    finally:
        try:
            resources.backend.close()
            if resources.store is not None:
                resources.store.close()
        except DiskFullError as exc:
            log.error("closing the store: %s", exc)
        finally:
            resources.engine.dispose()


def _version() -> str:
    try:
        return importlib.metadata.version("mqlens")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def _settle_heap() -> None:
    """Move what start-up made (routes, schemas, the libraries' modules: hundreds of thousands of
    objects that live as long as the server) out of the cycle collector's reach, so its full
    passes walk only what requests made (they cost a produce request a third of its CPU)."""
    gc.collect()
    gc.freeze()


def create_app(settings: Settings, clock: Clock | None = None) -> FastAPI:
    clock = clock or SystemClock()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        resources = await run_in_threadpool(_start, settings, clock)
        # Receives run on threads of their own (a long poll holds one while it waits), as many as
        # the receive gate lets in, so they never wait for or starve the other routes' threads.
        app.state.receive_threads = anyio.CapacityLimiter(settings.max_receives)
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.request_threads
        app.state.store = resources.store
        app.state.backend = resources.backend
        app.state.put_batcher = PutBatcher(resources.store) if resources.store is not None else None
        app.state.sessions = resources.sessions
        app.state.session_secret = resources.session_secret
        app.state.redrive = resources.redrive
        app.state.pipeline_runner = resources.pipeline
        # The gRPC front checks every call's signature with it (verify, check_produce, check_consume).
        app.state.credential_verifier = resources.verifier.start()
        front = front_for(app.state, settings) if resources.store is not None else None
        if front is not None:
            try:
                await front.start()
            except BaseException:
                app.state.password_checks.close()
                await run_in_threadpool(_stop, resources)
                raise
        app.state.grpc_front = front
        demo_clients = None
        if front is not None and settings.demo:
            host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
            demo_clients = DemoClients(f"{host}:{front.port}", settings.data_dir / "demo-clients")
            await run_in_threadpool(demo_clients.start, resources.store)
        _settle_heap()
        trimmer = HeapTrimmer().start()
        try:
            yield
        finally:
            if demo_clients is not None:
                await run_in_threadpool(demo_clients.stop)
            if front is not None:
                await front.stop()
            trimmer.stop()
            await run_in_threadpool(app.state.content_searches.close)
            gc.unfreeze()
            app.state.password_checks.close()
            await run_in_threadpool(_stop, resources)

    app = FastAPI(title="mqlens", version=_version(), lifespan=lifespan, docs_url=None, redoc_url=None,
                  dependencies=[Depends(refuse_writes_when_read_only)],
                  description="Operations console and REST API of an embedded RocketMQ-compatible broker store. "
                              'Every error answers {"ok": false, "error": "...", "status": N}.')
    app.state.settings = settings
    app.state.clock = clock
    app.state.pipeline_setup = PipelineSetup.from_settings(settings)
    app.state.put_gate = PutGate(settings.max_pending_puts)
    app.state.receive_gate = PutGate(settings.max_receives, activity="receives")
    app.state.config_lock = threading.Lock()  # one configuration change at a time
    app.state.renderer = Renderer(project_dir() / "templates")
    app.state.login_limiter = LoginLimiter(clock, settings.failed_logins_per_minute)
    app.state.password_checks = PasswordCheckPool(settings.password_checks, settings.password_checks_waiting)
    app.state.principal_cache = PrincipalCache(clock)
    app.state.dead_letters = DeadLetterCache()
    app.state.content_searches = ContentSearches(clock)
    app.state.rates = RateSampler()  # messages/s on the dashboard
    app.state.client_sessions = ClientSessions(clock, silent_after_ms=settings.client_silent_s * 1000,
                                               forget_after_ms=settings.client_forget_s * 1000,
                                               max_sessions=settings.max_client_sessions)
    app.state.metrics_registry = metrics_registry(lambda: app.state.store)
    install_error_handlers(app)
    # The producers' and consumers' routes first: a request is matched against the routes in order.
    for module in (health, messages, receive, auth_routes, accounts_routes, dead_letter_routes, topics, groups,
                   config_routes, queue_view, timeline, resend, lookup, clients_routes, docs, metrics_routes,
                   dashboard_page, search_page, message_page, timeline_page, topics_page, groups_page, clients_page,
                   dead_letters_page, redrive_routes, redrive_page, config_page, audit_routes, audit_page,
                   pipeline_routes, analytics_page, admin_page, client_credential_routes, client_credentials_page,
                   cluster_routes, cluster_page, content_search_routes, content_search_page):
        app.include_router(module.router)
    app.mount(STATIC_PREFIX, StaticFiles(directory=project_dir() / "static"), name="static")
    app.add_middleware(JsonContentTypeMiddleware, refuse=_refuse_media_type)
    app.add_middleware(SessionCookieMiddleware)
    app.add_middleware(CrossOriginGuardMiddleware, refuse=_refuse_cross_origin)
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(BodyLimitMiddleware, limit_for=body_limit(settings),
                       budget=ByteBudget(settings.max_large_bodies_bytes), refuse=_refuse_body)
    app.add_middleware(JsonTwinMiddleware)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=settings.host_names())
    app.add_middleware(LingeringCloseMiddleware)  # outermost: after any early answer, the body's rest is read
    return app


def _refuse_cross_origin(scope: Scope, message: str) -> Response:
    return error_response(Request(scope), 403, message)


def _refuse_media_type(scope: Scope, message: str) -> Response:
    return error_response(Request(scope), 415, message)


def _refuse_body(scope: Scope, status: int, message: str, headers: dict[str, str] | None) -> Response:
    return error_response(Request(scope), status, message, headers)
