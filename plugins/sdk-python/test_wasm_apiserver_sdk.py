"""Unit tests of the Python SDK's builders (plain CPython, no bindings):
python3 -m unittest discover -s plugins/sdk-python"""

import json
import unittest

import wasm_apiserver_sdk as sdk


class PatchTest(unittest.TestCase):
    def test_pointers_escape_tilde_and_slash(self):
        self.assertEqual(sdk.pointer(["metadata", "labels", "a/b~c"]), "/metadata/labels/a~1b~0c")

    def test_set_creates_missing_parents_once(self):
        p = sdk.Patch.on({"metadata": {"name": "x"}}).set_label("a", "1").set_label("b", "2")
        self.assertEqual(p.ops, [
            {"op": "add", "path": "/metadata/labels", "value": {"a": "1"}},
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
        ])
        p = sdk.Patch.on({}).set_annotation("k", "v")
        self.assertEqual(p.ops, [{"op": "add", "path": "/metadata", "value": {"annotations": {"k": "v"}}}])

    def test_set_replaces_a_non_object_parent_and_skips_unchanged(self):
        obj = {"metadata": {"labels": None, "annotations": {"k": "v"}}}
        p = sdk.Patch.on(obj).set_label("a", "1").set_annotation("k", "v")
        self.assertEqual(p.ops, [{"op": "replace", "path": "/metadata/labels", "value": {"a": "1"}}])
        self.assertIsNone(obj["metadata"]["labels"], "the caller's object is not modified")

    def test_defaults_keep_what_is_there_in_key_order(self):
        obj = {"metadata": {"labels": {"b": "old"}}}
        p = sdk.Patch.on(obj).default_labels({"c": "3", "a": "1", "b": "2"}).default_annotations({"y": "2", "x": "1"})
        self.assertEqual(p.ops, [
            {"op": "add", "path": "/metadata/labels/a", "value": "1"},
            {"op": "add", "path": "/metadata/labels/c", "value": "3"},
            {"op": "add", "path": "/metadata/annotations", "value": {"x": "1"}},
            {"op": "add", "path": "/metadata/annotations/y", "value": "2"},
        ])

    def test_remove_only_what_exists(self):
        p = sdk.Patch.on({"metadata": {"labels": {"a": "1"}}}).remove_label("a").remove_label("a").remove_annotation("x")
        self.assertEqual(p.ops, [{"op": "remove", "path": "/metadata/labels/a"}])

    def test_raw_operations_and_text(self):
        p = sdk.Patch().test("/spec/replicas", 3).replace("/spec/replicas", 5).remove_pointer("/status")
        self.assertEqual(p.to_json(), '[{"op":"test","path":"/spec/replicas","value":3},'
                         '{"op":"replace","path":"/spec/replicas","value":5},{"op":"remove","path":"/status"}]')


class ResponseTest(unittest.TestCase):
    def test_deny_defaults_to_forbidden_and_takes_code_reason_causes(self):
        r = sdk.Response.deny("no")
        self.assertEqual((r.status["code"], r.status["reason"], r.message), (403, "Forbidden", "no"))
        r = sdk.Response.invalid("bad").cause("spec.replicas", "FieldValueInvalid", "too many")
        self.assertEqual((r.status["code"], r.status["reason"]), (422, "Invalid"))
        self.assertEqual(r.status["causes"], [{"field": "spec.replicas", "reason": "FieldValueInvalid", "message": "too many"}])

    def test_allow_ignores_denial_builders_and_when_falls_back_to_allow(self):
        r = sdk.Response.allow().code(500).cause("a", "b", "c").warn("w").annotate("k", "v")
        self.assertTrue(r.allowed)
        self.assertIsNone(r.status)
        self.assertEqual((r.warnings, r.audit_annotations), (["w"], [("k", "v")]))
        self.assertTrue(sdk.Response.deny("x").when(False).allowed)
        self.assertFalse(sdk.Response.deny("x").when(True).allowed)

    def test_violations(self):
        self.assertTrue(sdk.Violations().into_response("x").allowed)
        v = sdk.Violations()
        v.required("metadata.labels", "missing team")
        v.forbidden("metadata.name", "reserved")
        r = v.into_response('ConfigMap "a" denied')
        self.assertEqual(r.message, 'ConfigMap "a" denied: missing team; reserved')
        self.assertEqual([c["reason"] for c in r.status["causes"]], ["FieldValueRequired", "FieldValueForbidden"])


class ConfigTest(unittest.TestCase):
    SCHEMA = {"labels": [], "namePattern": sdk.pattern(), "mode": "warn"}

    def test_defaults_and_fields(self):
        c = sdk.parse_config("  ", self.SCHEMA)
        self.assertEqual((c.labels, c.namePattern, c.mode), ([], None, "warn"))
        c = sdk.parse_config('{"labels": ["team"], "namePattern": "^tmp-"}', self.SCHEMA)
        self.assertTrue(c.namePattern.is_match("tmp-1") and not c.namePattern.is_match("a-tmp"))
        self.assertEqual(str(c.namePattern), "^tmp-")

    def test_errors_name_the_problem(self):
        for text, want in [('{"lables": []}', "unknown field(s): lables"),
                           ('{"namePattern": "("}', 'invalid pattern "("'),
                           ('{"labels": "team"}', "labels must be a list"),
                           ("[1]", "expected a JSON object"),
                           ("{", "not JSON")]:
            with self.assertRaises(ValueError) as e:
                sdk.parse_config(text, self.SCHEMA)
            self.assertIn(want, str(e.exception))
            self.assertTrue(str(e.exception).startswith("invalid configuration: "))


class RequestTest(unittest.TestCase):
    def test_reads_the_object_and_falls_back_to_the_old_one(self):
        review = {"request": {"operation": "DELETE", "kind": {"kind": "ConfigMap"},
                              "oldObject": {"metadata": {"name": "a", "labels": {"team": "x"}}}}}
        r = sdk.Request.from_review(review)
        self.assertTrue(r.is_delete)
        self.assertEqual((r.name, r.label("team"), r.kind), ("a", "x", "ConfigMap"))
        self.assertEqual(r.missing_labels(["team", "env"]), ["env"])

    def test_a_policy_turns_bad_config_into_a_500(self):
        class P(sdk.Policy):
            config = {"x": 1}
        r = P().run("validate", '{"y": 2}', sdk.Request({}))
        self.assertEqual((r.allowed, r.status["code"]), (False, 500))
        self.assertTrue(P().run("validate", "", sdk.Request({})).allowed)


class ClusterTest(unittest.TestCase):
    """The cluster helpers' fixtures (what a context-aware policy's tests use)."""

    def ingress(self, ns, name, labels, host="a.example.com"):
        return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"namespace": ns, "name": name, "labels": labels},
                "spec": {"rules": [{"host": host}]}}

    def setUp(self):
        sdk.set_can_i(False)
        sdk.set_cluster([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "labels": {"team": "x"}}},
            self.ingress("a", "web", {"app": "web", "tier": "front"}),
            self.ingress("b", "web", {"app": "web"}),
            self.ingress("b", "db", {"app": "db", "legacy": "yes"}),
        ])

    def names(self, objects):
        return [o["metadata"]["name"] for o in objects]

    def test_get_finds_an_object_by_namespace_and_name(self):
        self.assertEqual(sdk.cluster.get("v1", "Namespace", None, "a")["metadata"]["labels"], {"team": "x"})
        self.assertIsNone(sdk.cluster.get("v1", "Namespace", None, "b"))
        self.assertEqual(sdk.cluster.get("networking.k8s.io/v1", "Ingress", "b", "web")["metadata"]["namespace"], "b")
        self.assertIsNone(sdk.cluster.get("networking.k8s.io/v1", "Ingress", None, "web"))
        self.assertIsNone(sdk.cluster.get("networking.k8s.io/v1beta1", "Ingress", "b", "web"))
        got = sdk.cluster.get("v1", "Namespace", None, "a")
        got["metadata"]["labels"]["team"] = "changed"
        self.assertEqual(sdk.cluster.get("v1", "Namespace", None, "a")["metadata"]["labels"], {"team": "x"},
                         "answers are copies")

    def test_list_by_namespace_and_label_selector(self):
        ing = "networking.k8s.io/v1", "Ingress"
        self.assertEqual(self.names(sdk.cluster.list(*ing)), ["web", "web", "db"])
        self.assertEqual(self.names(sdk.cluster.list(*ing, "b")), ["web", "db"])
        for selector, want in [("app=web", ["web", "web"]), ("app==web,tier=front", ["web"]),
                               ("app!=web", ["db"]), ("tier!=front", ["web", "db"]),
                               ("app in (db, web),!legacy", ["web", "web"]), ("app notin (web)", ["db"]),
                               ("legacy", ["db"]), ("", ["web", "web", "db"])]:
            self.assertEqual(self.names(sdk.cluster.list(*ing, label_selector=selector)), want, selector)
        with self.assertRaises(sdk.ClusterError):
            sdk.cluster.list(*ing, label_selector="app in web")

    def test_list_by_field_selector_on_any_path(self):
        ing = "networking.k8s.io/v1", "Ingress"
        two = self.ingress("b", "two", {}, "y.example.com")
        two["spec"]["rules"].append({"host": "x.example.com"})
        sdk.set_cluster([self.ingress("a", "one", {}, "x.example.com"), two, self.ingress("b", "none", {}, None)])
        for selector, want in [("spec.rules.host=x.example.com", ["one", "two"]),
                               ("spec.rules.host=y.example.com", ["two"]),
                               ("spec.rules.host!=y.example.com", ["one", "none"]),
                               ("spec.rules.host=x.example.com,metadata.namespace=b", ["two"]),
                               ("spec.rules.host=", ["none"])]:
            self.assertEqual(self.names(sdk.cluster.list(*ing, field_selector=selector)), want, selector)
        with self.assertRaises(sdk.ClusterError):
            sdk.cluster.list(*ing, field_selector="spec..host=a")

    def test_kinds_not_granted_raise_the_hosts_error(self):
        sdk.set_cluster([self.ingress("a", "web", {})], grants=[{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress"}])
        self.assertEqual(len(sdk.cluster.list("networking.k8s.io/v1", "Ingress")), 1)
        with self.assertRaises(sdk.ClusterError) as e:
            sdk.cluster.get("v1", "Secret", "a", "token")
        self.assertEqual(e.exception.message,
                         "reading v1 Secret is not granted: it is not in the plugin's spec.contextAwareResources")
        self.assertEqual(str(e.exception), e.exception.message)
        with self.assertRaises(sdk.ClusterError) as e:
            sdk.cluster.can_i("alice", "get", "", "pods")
        self.assertIn("reading authorization.k8s.io/v1 SubjectAccessReview is not granted", e.exception.message)
        sdk.set_cluster([], grants=[sdk.SUBJECT_ACCESS_REVIEW])
        self.assertFalse(sdk.cluster.can_i("alice", "get", "", "pods"))

    def test_can_i_answers_from_rules_or_a_function(self):
        alice = {"username": "alice", "uid": "1", "groups": ["devs"], "extra": {"scopes": ["a"]}}
        self.assertFalse(sdk.cluster.can_i(alice, "delete", "", "pods", namespace="team-a"), "denied until set")
        sdk.set_can_i([{"as": "alice", "verb": ["get", "delete"], "resource": "pods", "namespace": "team-a"},
                       {"asGroup": "admins"}])
        self.assertTrue(sdk.cluster.can_i(alice, "delete", "", "pods", namespace="team-a"))
        self.assertFalse(sdk.cluster.can_i(alice, "delete", "", "pods", namespace="team-b"))
        self.assertFalse(sdk.cluster.can_i(alice, "delete", "", "pods"), "cluster-wide is not team-a")
        self.assertFalse(sdk.cluster.can_i(alice, "create", "", "pods", namespace="team-a"))
        self.assertFalse(sdk.cluster.can_i("bob", "delete", "", "pods", namespace="team-a"))
        self.assertTrue(sdk.cluster.can_i({"username": "bob", "groups": ["admins"]}, "delete", "apps", "deployments"))
        seen = []
        sdk.set_can_i(lambda user, attributes: seen.append((user, attributes)) or attributes["verb"] == "get")
        self.assertTrue(sdk.cluster.can_i(alice, "get", "apps", "deployments", namespace="a", name="web",
                                          subresource="scale"))
        self.assertEqual(seen, [({"username": "alice", "uid": "1", "groups": ["devs"], "extra": {"scopes": ["a"]}},
                                 {"verb": "get", "group": "apps", "resource": "deployments", "subresource": "scale",
                                  "namespace": "a", "name": "web"})])
        sdk.set_can_i(True)
        self.assertTrue(sdk.cluster.can_i("anyone", "delete", "", "nodes"))

    def test_in_a_component_the_calls_go_to_the_cluster_import(self):
        import sys
        import types

        calls, fields = [], []

        class Err(Exception):
            def __init__(self, value):
                self.value = value

        def record(name):  # a bindings record: equal when built from equal fields
            return type(name, (), {"__init__": lambda self, *args: setattr(self, "args", args),
                                   "__eq__": lambda self, o: type(o) is type(self) and o.args == self.args,
                                   "__repr__": lambda self: f"{name}{self.args}"})

        def page(names, token):
            return types.SimpleNamespace(items=[types.SimpleNamespace(json=json.dumps({"metadata": {"name": n}}))
                                                for n in names], continue_token=token)

        imports = types.ModuleType("wit_world.imports.cluster")
        imports.KindRef, imports.ListOptions = record("KindRef"), record("ListOptions")
        imports.ResourceAttributes, imports.Target_Kind = record("ResourceAttributes"), record("Target_Kind")

        def get(target, namespace, name):
            calls.append(("get", target, namespace, name))
            if name == "secret":
                raise Err("reading v1 Secret is not granted: ...")
            return types.SimpleNamespace(json='{"kind": "Namespace"}') if name == "a" else None

        def list_(target, options):
            calls.append(("list", options.args[4]))
            fields.append(options.args[2])
            return page(["c"], None) if options.args[4] else page(["a", "b"], "next")

        def can_i(user, attributes):
            calls.append(("can_i", user, attributes))
            return True

        imports.get, imports.list, imports.can_i = get, list_, can_i
        types_module = types.ModuleType("wit_world.imports.types")
        types_module.UserInfo = record("UserInfo")
        wit_world, wit_imports = types.ModuleType("wit_world"), types.ModuleType("wit_world.imports")
        wit_imports.cluster, wit_imports.types, wit_world.imports = imports, types_module, wit_imports
        cpt = types.ModuleType("componentize_py_types")
        cpt.Err = Err
        fakes = {"wit_world": wit_world, "wit_world.imports": wit_imports, "wit_world.imports.cluster": imports,
                 "wit_world.imports.types": types_module, "componentize_py_types": cpt}
        saved = sdk._cluster_current
        sys.modules.update(fakes)
        sdk._cluster_current = None
        try:
            self.assertEqual(sdk.cluster.get("v1", "Namespace", None, "a"), {"kind": "Namespace"})
            self.assertIsNone(sdk.cluster.get("v1", "Namespace", None, "b"))
            self.assertEqual(calls[0], ("get", imports.Target_Kind(imports.KindRef("v1", "Namespace")), None, "a"))
            with self.assertRaises(sdk.ClusterError) as e:
                sdk.cluster.get("v1", "Secret", "x", "secret")
            self.assertEqual(e.exception.message, "reading v1 Secret is not granted: ...")
            self.assertEqual(self.names(sdk.cluster.list("v1", "ConfigMap")), ["a", "b", "c"])
            self.assertEqual([c for c in calls if c[0] == "list"], [("list", None), ("list", "next")])
            sdk.cluster.list("v1", "ConfigMap", field_selector="data.k=v")
            self.assertEqual(fields, [None, None, "data.k=v", "data.k=v"])
            user = {"username": "alice", "groups": ["g"], "extra": {"k": ["v"]}}
            self.assertTrue(sdk.cluster.can_i(user, "get", "", "pods", namespace="n"))
            self.assertEqual(calls[-1], ("can_i", types_module.UserInfo("alice", "", ["g"], [("k", ["v"])]),
                                         imports.ResourceAttributes("get", "", "pods", None, "n", None)))
        finally:
            for name in fakes:
                del sys.modules[name]
            sdk._cluster_current = saved

    def test_set_cluster_keeps_the_can_i_answer(self):
        sdk.set_can_i(True)
        sdk.set_cluster([])
        self.assertTrue(sdk.cluster.can_i("alice", "get", "", "pods"))
        self.assertEqual(sdk.cluster.list("v1", "Namespace"), [])


class ControllerTest(unittest.TestCase):
    """The controller SDK's native harness, on the namespace-defaults example."""

    def setUp(self):
        import importlib.util
        import os
        import sys
        import wasm_apiserver_controller_sdk as ctl
        self.ctl = ctl
        path = os.path.join(os.path.dirname(__file__), "../../examples/namespace-defaults/python/app.py")
        spec = importlib.util.spec_from_file_location("namespace_defaults_app", path)
        module = importlib.util.module_from_spec(spec)
        # Natively `export` cannot import the bindings: load the class only.
        sys.modules["namespace_defaults_app"] = module
        ctl_export = ctl.export
        ctl.export = lambda cls: cls
        try:
            spec.loader.exec_module(module)
        finally:
            ctl.export = ctl_export
        self.app = module

    def key(self, name):
        return self.ctl.Request("", "v1", "namespaces", None, name)

    def test_a_labelled_namespace_gets_three_objects_and_loses_them_with_the_label(self):
        ctl, app = self.ctl, self.app
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "uid": "u", "labels": {"tenant": "a"}}}
        ctl.set_cluster([ns])
        self.assertIsNone(ctl.reconcile(app.NamespaceDefaults, "", self.key("a")))
        self.assertEqual([(w[0], w[1]) for w in ctl.writes()],
                         [("apply", "NetworkPolicy"), ("apply", "ResourceQuota"), ("apply", "RoleBinding")])
        objects = ctl.objects()
        objects[0] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "uid": "u"}}
        ctl.set_cluster(objects)
        ctl.reconcile(app.NamespaceDefaults, "", self.key("a"))
        self.assertEqual([w[0] for w in ctl.writes()], ["delete"] * 3)

    def test_unknown_configuration_is_refused(self):
        with self.assertRaises(ValueError):
            self.ctl.reconcile(self.app.NamespaceDefaults, '{"nope": 1}', self.key("a"))



class UniqueIngressHostTest(unittest.TestCase):
    """A context-aware policy tested offline: the Python unique-ingress-host
    example on cluster fixtures."""

    @classmethod
    def setUpClass(cls):
        import importlib.util
        import os
        path = os.path.join(os.path.dirname(__file__), "../../examples/unique-ingress-host/python/app.py")
        spec = importlib.util.spec_from_file_location("unique_ingress_host_app", path)
        module = importlib.util.module_from_spec(spec)
        # Natively `export` cannot import the bindings: load the class only.
        export, sdk.export = sdk.export, lambda cls: cls
        try:
            spec.loader.exec_module(module)
        finally:
            sdk.export = export
        cls.policy = module.UniqueIngressHost()

    @staticmethod
    def ingress(ns, name, *hosts):
        return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"namespace": ns, "name": name},
                "spec": {"rules": [{"host": h} for h in hosts]}}

    def validate(self, obj, config="", user="alice"):
        review = {"request": {"operation": "CREATE", "namespace": obj["metadata"]["namespace"],
                              "name": obj["metadata"]["name"], "userInfo": {"username": user, "groups": []},
                              "kind": {"group": "networking.k8s.io", "version": "v1", "kind": "Ingress"},
                              "object": obj}}
        return self.policy.run("validate", config, sdk.Request.from_review(review))

    def setUp(self):
        sdk.set_can_i(False)
        sdk.set_cluster([self.ingress("team-a", "web", "web.example.com"), self.ingress("team-a", "api")])

    def test_a_host_served_in_another_namespace_is_refused(self):
        r = self.validate(self.ingress("team-b", "web", "new.example.com", "web.example.com"))
        self.assertEqual((r.allowed, r.status["code"], r.status["reason"]), (False, 409, "Conflict"))
        self.assertEqual(r.message, 'host "web.example.com" is already served by ingress team-a/web')
        self.assertTrue(self.validate(self.ingress("team-b", "web", "new.example.com")).allowed)
        self.assertTrue(self.validate(self.ingress("team-b", "default-backend")).allowed)
        # Its own earlier version does not count (an update, or a retried create).
        self.assertTrue(self.validate(self.ingress("team-a", "web", "web.example.com")).allowed)

    def test_without_the_grant_the_policy_denies_with_the_hosts_error(self):
        sdk.set_cluster([], grants=[("v1", "ConfigMap")])
        r = self.validate(self.ingress("team-b", "web", "web.example.com"))
        self.assertEqual(r.message, "cannot list ingresses: reading networking.k8s.io/v1 Ingress is not granted: "
                                    "it is not in the plugin's spec.contextAwareResources")

    def test_owners_may_share_a_host_when_they_may_update_the_other_ingress(self):
        shared = '{"ownersMayShare": true}'
        sdk.set_can_i([{"as": "alice", "verb": "update", "group": "networking.k8s.io", "resource": "ingresses",
                        "namespace": "team-a"}])
        self.assertTrue(self.validate(self.ingress("team-b", "web", "web.example.com"), shared).allowed)
        self.assertFalse(self.validate(self.ingress("team-b", "web", "web.example.com"), shared, "bob").allowed)
        self.assertFalse(self.validate(self.ingress("team-b", "web", "web.example.com")).allowed, "off by default")
        sdk.set_cluster([self.ingress("team-a", "web", "web.example.com")],
                        grants=[("networking.k8s.io/v1", "Ingress")])
        r = self.validate(self.ingress("team-b", "web", "web.example.com"), shared)
        self.assertTrue(r.message.startswith("cannot review access to ingress team-a/web: reading "
                                             "authorization.k8s.io/v1 SubjectAccessReview is not granted"), r.message)


if __name__ == "__main__":
    unittest.main()
