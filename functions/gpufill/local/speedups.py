"""What makes moto fast enough for the suite, changing nothing it answers: botocore models loaded
once per process, state machine definitions parsed once, one Lambda client per region for the
interpreter, response classes' method listings kept, retry backoff that costs no wall time, each
answer's member names listed once per shape, the interpreter's JSON copied as JSON, DynamoDB's
expression walkers' node types listed once per walker and an update expression's clauses counted
once per node."""

from __future__ import annotations

import copy
import datetime
import json
import threading
import time
import weakref
from contextlib import ExitStack
from typing import Any
from unittest import mock


def no_sleeping_retries():
    """Retry backoff (the state machine's and botocore's own) costs no wall time locally."""
    import botocore.endpoint
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    class _Clock:
        @staticmethod
        def sleep(seconds: float) -> None:
            return None

        def __getattr__(self, name):
            return getattr(time, name)

    stack = ExitStack()
    stack.enter_context(mock.patch.object(retrier_decl, "time", _Clock()))
    stack.enter_context(mock.patch.object(botocore.endpoint, "time", _Clock()))
    return stack


def one_lambda_client_per_region():
    """moto's interpreter makes a new boto3 Lambda client for every Lambda task it runs (about
    7 ms each); one per region serves them all (it ignores a task's Credentials either way)."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    original = lambda_eval_utils.boto_client_for
    clients: dict[tuple[str, str], Any] = {}
    lock = threading.Lock()

    def boto_client_for(region: str, service: str, state_credentials: Any = None):
        with lock:
            if (region, service) not in clients:
                clients[(region, service)] = original(region=region, service=service, state_credentials=state_credentials)
            return clients[(region, service)]

    return mock.patch.object(lambda_eval_utils, "boto_client_for", boto_client_for)


_MODELS: dict[tuple, Any] = {}
_MODELS_LOCK = threading.RLock()  # a model load lists the services first


def shared_botocore_models():
    """Every boto3 session in the process (the handlers', Powertools', moto's interpreter's)
    loads each service model once. A botocore Loader caches models per session, and the
    interpreter and Powertools make new sessions, so each would parse the same multi-megabyte
    JSON again. The models are read-only once loaded (botocore already hands one cached
    object to every client of a session). Likewise, per process: the listing of every service's
    directory (over 400) a new Loader makes before its first model, the endpoints and other
    top-level data files (read-only too), and a service's regions (each new session would load
    the service's whole model to read its endpoint prefix; moto makes a session per backend)."""
    from botocore.loaders import Loader
    from botocore.session import Session

    original = Loader.load_service_model
    original_listing = Loader.list_available_services
    original_data = Loader.load_data_with_path
    original_regions = Session.get_available_regions

    def load_service_model(loader, service_name, type_name, api_version=None):
        # Loaders with other search paths (boto3's, moto's) load the same file: the key is the
        # file a loader would read and the extras it would merge into it (moto's loader merges
        # its own, boto3's the SDK's).
        try:
            version = api_version or loader.determine_latest_version(service_name, type_name)
            name = f"{service_name}/{version}/{type_name}"
            found = next(path for path in loader._potential_locations(name) if loader.file_loader.exists(path))
            extras = tuple(json.dumps(e, sort_keys=True) for e in loader._find_extras(service_name, type_name, version))
            key = ("model", found, extras)
        except Exception:  # noqa: BLE001 (an unknown service or version: the loader itself says so)
            key = (tuple(loader.search_paths), service_name, type_name, api_version)
        with _MODELS_LOCK:  # parallel Map branches would otherwise each parse the same model at once
            if key not in _MODELS:
                _MODELS[key] = original(loader, service_name, type_name, api_version)
            return _MODELS[key]

    def list_available_services(loader, type_name):
        key = ("services", tuple(loader.search_paths), type_name)
        with _MODELS_LOCK:
            if key not in _MODELS:
                _MODELS[key] = tuple(original_listing(loader, type_name))
            return list(_MODELS[key])

    def load_data_with_path(loader, name):
        # Only the top-level files (endpoints, partitions, _retry, sdk-default-configuration):
        # a service model gets its extras merged into it in place, per loader.
        if "/" in name:
            return original_data(loader, name)
        found = next((path for path in loader._potential_locations(name) if loader.file_loader.exists(path)), None)
        key = ("data", found or tuple(loader.search_paths), name)
        with _MODELS_LOCK:
            if key not in _MODELS:
                _MODELS[key] = original_data(loader, name)
            return _MODELS[key]

    def get_available_regions(session, service_name, partition_name="aws", allow_non_regional=False):
        key = ("regions", tuple(session.get_component("data_loader").search_paths), service_name,
               partition_name, allow_non_regional)
        with _MODELS_LOCK:
            if key not in _MODELS:
                _MODELS[key] = tuple(original_regions(session, service_name, partition_name, allow_non_regional))
            return list(_MODELS[key])

    stack = ExitStack()
    stack.enter_context(handlers_inspected_once())
    stack.enter_context(mock.patch.object(Loader, "load_service_model", load_service_model))
    stack.enter_context(mock.patch.object(Loader, "list_available_services", list_available_services))
    stack.enter_context(mock.patch.object(Loader, "load_data_with_path", load_data_with_path))
    stack.enter_context(mock.patch.object(Session, "get_available_regions", get_available_regions))
    return stack


_KWARGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def handlers_inspected_once():
    """botocore checks that every handler registered on an event emitter takes **kwargs, with
    inspect.getfullargspec: about 1,300 handlers for every new session (moto starts each engine
    with one; Powertools and the interpreter make more) and a dozen for every client. The answer
    depends only on the callable (a bound method's on its function), so it is kept for each one
    while it lives; a callable that cannot be weakly referenced is inspected every time, and one
    that cannot be inspected raises as before."""
    from botocore import hooks

    original = hooks.accepts_kwargs

    def accepts_kwargs(func):
        target = getattr(func, "__func__", func)
        try:
            with _MODELS_LOCK:
                return _KWARGS[target]
        except (KeyError, TypeError):  # not seen yet, or not weakly referable or hashable
            pass
        answer = original(func)
        try:
            with _MODELS_LOCK:
                _KWARGS[target] = answer
        except TypeError:
            pass
        return answer

    return mock.patch.object(hooks, "accepts_kwargs", accepts_kwargs)


_PARSE_TREES: dict[str, Any] = {}
_PARSE_LOCK = threading.Lock()
_VALID_DEFINITIONS: set[str] = set()


def parse_definitions_once():
    """moto parses a definition with ANTLR when the state machine is created and again at every
    StartExecution (about 0.3 s for gpufill's). The parse tree of a text that parsed without
    errors is kept for the process; every parse still builds fresh evaluation components from
    it (moto's Preprocessor reads the tree, never changes it), so no execution shares state
    with another. A text with syntax errors is parsed, and refused, every time. The text of
    each node of a kept tree is kept too: the Preprocessor asks for the whole program's text
    (for an error message it raises only when StartAt or States is missing) on every build.

    CreateStateMachine only checks that the definition builds (moto throws the program away), and
    a build is the same for the same text, so a text that built once is not built again for that
    check (0.05 to 0.2 s for gpufill's, at every engine's deploy); one that failed is tried, and
    refused, every time."""
    from antlr4.RuleContext import RuleContext
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    original_validate = StepFunctionsParserBackend._validate_definition

    original = AmazonStateLanguageParser.parse
    original_text = RuleContext.getText

    def parse(definition: str):
        with _PARSE_LOCK:
            tree = _PARSE_TREES.get(definition)
        if tree is None:
            program, tree = original(definition)
            with _PARSE_LOCK:
                _remember_texts(tree)
                _PARSE_TREES[definition] = tree
            return program, tree
        return Preprocessor().visit(tree), tree

    def get_text(context):
        text = _TEXTS.get(id(context))  # only nodes of kept trees, which live as long as the process
        return text if text is not None else original_text(context)

    def validate_definition(definition: str):
        with _PARSE_LOCK:
            if definition in _VALID_DEFINITIONS:
                return
        original_validate(definition=definition)  # raises InvalidDefinition for a text that does not build
        with _PARSE_LOCK:
            _VALID_DEFINITIONS.add(definition)

    stack = ExitStack()
    stack.enter_context(mock.patch.object(AmazonStateLanguageParser, "parse", staticmethod(parse)))
    stack.enter_context(mock.patch.object(RuleContext, "getText", get_text))
    stack.enter_context(mock.patch.object(StepFunctionsParserBackend, "_validate_definition", staticmethod(validate_definition)))
    return stack


_TEXTS: dict[int, str] = {}


def _remember_texts(tree) -> str:
    from antlr4.RuleContext import RuleContext

    if not isinstance(tree, RuleContext):
        return tree.getText()  # a token
    text = "".join(_remember_texts(child) for child in (tree.children or ()))
    _TEXTS[id(tree)] = text
    return text


def one_response_method_listing():
    """moto lists a response class's methods (inspect.getmembers, about a millisecond) on every
    request to see whether it has the action; the listing is kept per class while the engine runs."""
    from moto.core import responses

    original = responses.method_names_from_class
    listings: dict[type, list[str]] = {}

    def method_names_from_class(clazz):
        if clazz not in listings:
            listings[clazz] = original(clazz)
        return listings[clazz]

    return mock.patch.object(responses, "method_names_from_class", method_names_from_class)




_ALIASES: dict[tuple, tuple[str, ...]] = {}


def one_alias_listing_per_member():
    """moto's response serializer finds each member of an answer (every EC2 instance's every
    field, every DynamoDB item's) by asking six alias providers, built afresh for each member,
    which names the member might have on the Python object, then trying each name. The names
    depend only on the object's class (and its Meta aliases), the member's shape, its parent
    shape and its key, so they are listed once per such combination; the names are tried in the
    same order as before and the value moto picks is the same."""
    from moto.core import serialize
    from moto.core.utils import MISSING, get_value

    original = serialize.AttributePicker.__call__

    def possible_keys(picker, context) -> tuple[str, ...]:
        obj, shape = context.obj, context.shape
        key = (type(picker), tuple(picker.alias_providers), obj.__class__, getattr(obj, "Meta", None),
               shape, getattr(shape, "parent", None), context.key)
        keys = _ALIASES.get(key)
        if keys is None:
            keys = _ALIASES[key] = tuple(picker.get_possible_keys(context))
        return keys

    def pick(picker, context):
        try:
            keys = possible_keys(picker, context)
        except Exception:  # noqa: BLE001 (an unhashable Meta, say: moto's own way, which says what is wrong)
            return original(picker, context)
        obj = context.obj
        plain = type(obj) is dict  # not a subclass: a defaultdict would add the key moto's lookup asks for
        for possible_key in keys:
            if plain and "." not in possible_key:
                value = obj.get(possible_key, MISSING)
            else:
                value = get_value(obj, possible_key, MISSING)
            if value is not MISSING:
                break
        else:
            value = None
        if picker.response_transformers:
            key_path = f"{context.key_path}.{context.key}"
            for transform_path, transform in picker.response_transformers.items():
                if key_path.endswith(transform_path):
                    value = transform(value)
                    break
        return value

    return mock.patch.object(serialize.AttributePicker, "__call__", pick)


_ATOMIC = (str, int, float, bool, type(None), datetime.datetime)


def json_copy(value: Any) -> Any:
    """A deep copy of a state's JSON data (dicts, lists, strings, numbers, booleans, null, and the
    history's timestamps), several times faster than copy.deepcopy, which keeps a memo of every
    object it meets; anything else is left to copy.deepcopy."""
    kind = type(value)
    if kind is dict:
        return {key: json_copy(item) for key, item in value.items()}
    if kind is list:
        return [json_copy(item) for item in value]
    if kind in _ATOMIC:
        return value  # immutable: copy.deepcopy returns it (or an equal timestamp) too
    return copy.deepcopy(value)


class _JsonCopying:
    """Stands in for the copy module in moto's interpreter modules: deepcopy is json_copy."""

    def __getattr__(self, name):
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        if memo is not None:
            return copy.deepcopy(value, memo)
        try:
            return json_copy(value)
        except RecursionError:  # data that refers to itself: copy.deepcopy keeps the cycle
            return copy.deepcopy(value)


def json_copies_in_the_interpreter():
    """moto's Step Functions interpreter deep-copies each state's input, result and context, and
    the whole history at every GetExecutionHistory (about a tenth of a run's CPU in copy.deepcopy).
    That data is JSON, so a JSON copy gives the same values. The one difference, that an object
    met twice is copied twice instead of once, cannot change an answer: the interpreter's data
    came from JSON texts, which share nothing."""
    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.component.common.string import string_expression
    from moto.stepfunctions.parser.asl.component.state.exec import execute_state
    from moto.stepfunctions.parser.asl.component.state.exec.state_map import state_map
    from moto.stepfunctions.parser.asl.component.state.exec.state_parallel import state_parallel
    from moto.stepfunctions.parser.asl.eval import environment, states
    from moto.stepfunctions.parser.asl.eval.event import event_manager

    shim = _JsonCopying()
    stack = ExitStack()
    for module in (result_path, string_expression, execute_state, state_map, state_parallel, environment,
                   states, event_manager):
        stack.enter_context(mock.patch.object(module, "copy", shim))
    return stack


def one_node_type_listing_per_traverser():
    """moto checks an UpdateExpression (every DynamoDB UpdateItem gpufill sends) with a chain of
    tree walkers, each of which rebuilds its map of node types to handlers at every node of the
    tree to see whether to handle it. The node types are the same for every instance of a walker
    (each class maps fixed classes), so they are listed once per class."""
    from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser

    original = DepthFirstTraverser.nodes_to_be_processed
    listings: dict[type, tuple[type, ...]] = {}

    def nodes_to_be_processed(traverser):
        kind = type(traverser)
        if kind not in listings:
            listings[kind] = original(traverser)
        return listings[kind]

    return mock.patch.object(DepthFirstTraverser, "nodes_to_be_processed", nodes_to_be_processed)


def one_clause_count_per_update_expression():
    """moto refuses an UpdateExpression with two ADD, REMOVE or SET sections (ActionCountValidator)
    by listing, at every node of the expression's tree, every clause below it: quadratic in the
    tree, and gpufill's record writes set a dozen attributes each (about a fiftieth of a workflow
    test's CPU). Here each node's three counts are summed once from its children's, counted as
    moto's Node.find_clauses counts them (a clause of the kind counts one and is not looked into;
    any other expression or function is looked into), and the nodes are checked in moto's order
    (depth first, children before their parent) with its three checks in its order, so the same
    expression is refused with the same error, and any other passes unchanged."""
    from moto.dynamodb.exceptions import TooManyClauses
    from moto.dynamodb.parsing import ast_nodes
    from moto.dynamodb.parsing.validators import ActionCountValidator

    kinds = (
        ("ADD", ast_nodes.UpdateExpressionAddClause),
        ("REMOVE", ast_nodes.UpdateExpressionRemoveClause),
        ("SET", ast_nodes.UpdateExpressionSetClause),
    )
    looked_into = (ast_nodes.Expression, ast_nodes.UpdateExpressionFunction)

    def counts(node) -> list[int]:
        """The clauses of each kind node.find_clauses([kind]) would list, after checking the nodes below."""
        found = [0] * len(kinds)
        for child in node.children or []:
            below = counts(child) if isinstance(child, ast_nodes.Node) else None
            for number, (_, kind) in enumerate(kinds):
                if type(child) is kind:
                    found[number] += 1
                elif below is not None and isinstance(child, looked_into):
                    found[number] += below[number]
        if isinstance(node, ast_nodes.UpdateExpression):
            for (name, _), count in zip(kinds, found):
                if count > 1:
                    raise TooManyClauses(name)
        return found

    def traverse(validator, node):
        if isinstance(node, ast_nodes.Node):
            counts(node)
        return node

    return mock.patch.object(ActionCountValidator, "traverse", traverse)
