using System.Globalization;
using System.Net;
using System.Text.RegularExpressions;
using Herald.Broker.Hosting;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.Options;
using YamlDotNet.RepresentationModel;

namespace Herald.Broker.Tests;

/// <summary>
/// The manifests of <c>deploy/</c> read as YAML (no Docker engine or Kubernetes API here): the cluster
/// compose file runs three nodes on one Redis behind HAProxy, the Kubernetes manifests scale past one
/// replica only with a Redis behind them, every file the kustomization or a compose file names exists, and
/// the shard files (a compose override, a kustomization over the manifests) give every node the same two Redis
/// shards in order, a configuration the broker's validator accepts.
/// What the running stack does (HAProxy's stickiness, the nodes' routing) is checked by hand and by the
/// cluster tests; this keeps the files consistent with each other as they change.
/// Safe by default: the client Services and the compose file publish client ports only; the monitoring
/// listener has a ClusterIP Service of its own (and loopback in compose); the pod runs non-root on a
/// read-only root filesystem without privileges; the PodDisruptionBudget covers the broker's pods; the
/// probes name the monitoring listener, whose paths a real broker started with the ConfigMap answers as the
/// drain needs; the grace periods exceed the configured drain.
/// </summary>
public sealed partial class OperationsDeployManifestTests
{
    private static readonly string Deploy = Path.Combine(OperationsDeployTests.RepositoryRoot(), "deploy");

    private static readonly string Kubernetes = Path.Combine(Deploy, "kubernetes");

    private static readonly string Cluster = Path.Combine(Deploy, "cluster");

    [Fact]
    public void The_kustomization_lists_every_manifest_and_each_exists()
    {
        var listed = Resources().Order(StringComparer.Ordinal).ToList();
        var files = Directory.GetFiles(Kubernetes, "*.yaml")
            .Select(file => Path.GetFileName(file))
            .Where(name => name != "kustomization.yaml")
            .Order(StringComparer.Ordinal)
            .ToList();
        Assert.Equal(files, listed);
    }

    [Fact]
    public void Kubernetes_replicas_past_one_join_one_Redis_whose_password_comes_from_a_Secret()
    {
        List<YamlMappingNode> objects = KubernetesObjects();
        YamlMappingNode herald = Object(objects, "Deployment", "herald");
        Assert.True(int.Parse(Scalar(herald, "spec", "replicas"), System.Globalization.CultureInfo.InvariantCulture) > 1, "the Deployment should run more than one node");

        // Herald__Cluster__Redis names the Redis Service, with a password taken from a Secret of the kustomization.
        YamlMappingNode container = Container(herald, "herald");
        List<YamlMappingNode> env = Sequence(container, "env").Cast<YamlMappingNode>().ToList();
        YamlMappingNode cluster = Assert.Single(env, e => Scalar(e, "name") == "Herald__Cluster__Redis");
        Match redis = RedisConfiguration().Match(Scalar(cluster, "value"));
        Assert.True(redis.Success, $"Herald__Cluster__Redis should be host:port,password=$(VAR): {Scalar(cluster, "value")}");
        string variable = redis.Groups["variable"].Value;
        int defined = env.FindIndex(e => Scalar(e, "name") == variable);
        Assert.True(defined >= 0 && defined < env.IndexOf(cluster), $"{variable} must be defined before Herald__Cluster__Redis to be expanded in it");
        (string secret, string key) = SecretKey(env[defined]);
        YamlMappingNode secretObject = Object(objects, "Secret", secret);
        Assert.True(
            Has(secretObject, "stringData", key) || Has(secretObject, "data", key),
            $"Secret {secret} should hold key {key}");

        // That Service selects a Redis Deployment which takes its password from the same Secret key,
        // and is inside the cluster only.
        YamlMappingNode service = Object(objects, "Service", redis.Groups["host"].Value);
        Assert.Equal("ClusterIP", Scalar(service, "spec", "type"));
        Assert.Contains(Sequence(service, "spec", "ports").Cast<YamlMappingNode>(), p => Scalar(p, "port") == redis.Groups["port"].Value);
        YamlMappingNode redisDeployment = Assert.Single(
            objects, o => Scalar(o, "kind") == "Deployment" && Selects(service, Mapping(o, "spec", "template", "metadata", "labels")));
        YamlMappingNode redisContainer = (YamlMappingNode)Assert.Single(Sequence(redisDeployment, "spec", "template", "spec", "containers"));
        Assert.StartsWith("redis:", Scalar(redisContainer, "image"), StringComparison.Ordinal);
        List<string> args = Sequence(redisContainer, "args").Select(a => ((YamlScalarNode)a).Value ?? "").ToList();
        int requirePass = args.IndexOf("--requirepass");
        Assert.True(requirePass >= 0 && requirePass + 1 < args.Count, "Redis should require a password");
        string redisVariable = Regex.Match(args[requirePass + 1], @"^\$\((\w+)\)$").Groups[1].Value;
        YamlMappingNode redisEnv = Assert.Single(Sequence(redisContainer, "env").Cast<YamlMappingNode>(), e => Scalar(e, "name") == redisVariable);
        Assert.Equal((secret, key), SecretKey(redisEnv));

        // The Herald Services never select the Redis pods.
        foreach (YamlMappingNode heraldService in objects.Where(o => Scalar(o, "kind") == "Service" && Scalar(o, "metadata", "name").StartsWith("herald", StringComparison.Ordinal) && o != service))
        {
            Assert.False(Selects(heraldService, Mapping(redisDeployment, "spec", "template", "metadata", "labels")), $"Service {Scalar(heraldService, "metadata", "name")} selects the Redis pods");
        }
    }

    [Fact]
    public void Kubernetes_client_Service_keeps_a_client_on_one_pod_and_the_probes_keep_their_meaning()
    {
        List<YamlMappingNode> objects = KubernetesObjects();
        YamlMappingNode herald = Object(objects, "Deployment", "herald");
        YamlMappingNode client = Object(objects, "Service", "herald");
        Assert.Equal("ClientIP", Scalar(client, "spec", "sessionAffinity")); // long-poll: a session's requests mostly reach its owner (saves a forward)
        Assert.DoesNotContain(Sequence(client, "spec", "ports").Cast<YamlMappingNode>(), p => Scalar(p, "port") == "8222");
        Assert.True(Selects(client, Mapping(herald, "spec", "template", "metadata", "labels")));

        YamlMappingNode container = Container(herald, "herald");
        Assert.Equal(("/readyz", "monitoring"), Probe(container, "startupProbe"));
        Assert.Equal(("/readyz", "monitoring"), Probe(container, "readinessProbe"));
        Assert.Equal(("/healthz", "monitoring"), Probe(container, "livenessProbe"));

        YamlMappingNode budget = Object(objects, "PodDisruptionBudget", "herald");
        Assert.Equal("1", Scalar(budget, "spec", "maxUnavailable"));
        YamlMappingNode selector = Mapping(budget, "spec", "selector", "matchLabels");
        Assert.All(selector.Children, label => Assert.Equal(label.Value.ToString(), Mapping(herald, "spec", "template", "metadata", "labels")[label.Key].ToString()));
    }

    [Fact]
    public void Kubernetes_clients_reach_only_client_ports_and_monitoring_has_its_own_ClusterIP_Service()
    {
        List<YamlMappingNode> objects = KubernetesObjects();
        HeraldOptions configured = KubernetesOptions(objects);
        YamlMappingNode herald = Object(objects, "Deployment", "herald");
        YamlMappingNode pods = Mapping(herald, "spec", "template", "metadata", "labels");
        YamlMappingNode container = Container(herald, "herald");
        int monitoring = ContainerPort(container, "monitoring");
        Assert.Equal(configured.Monitoring.Port, monitoring);
        Assert.False(IPAddress.TryParse(configured.Monitoring.Host, out IPAddress? host) && IPAddress.IsLoopback(host), "the kubelet and Prometheus reach the monitoring listener on the pod's address");

        var clientPorts = new HashSet<int> { configured.Http.Port };
        clientPorts.UnionWith(Enumerable.Range(configured.Tcp.PortRangeStart, configured.Tcp.PortRangeEnd - configured.Tcp.PortRangeStart + 1));
        if (configured.Policy.Port > 0)
        {
            clientPorts.Add(configured.Policy.Port);
        }

        // Every Service reachable from outside the cluster forwards client ports only, and every kind of client port.
        List<YamlMappingNode> heraldServices = [.. objects.Where(o => Scalar(o, "kind") == "Service" && Selects(o, pods))];
        List<YamlMappingNode> outside = [.. heraldServices.Where(s => ServiceType(s) != "ClusterIP")];
        Assert.NotEmpty(outside);
        foreach (YamlMappingNode service in outside)
        {
            List<int> targets = [.. Sequence(service, "spec", "ports").Cast<YamlMappingNode>().Select(p => TargetPort(container, p))];
            Assert.All(targets, target => Assert.True(clientPorts.Contains(target), $"Service {Scalar(service, "metadata", "name")} forwards {target}, not a client port"));
            Assert.Contains(configured.Http.Port, targets);
            Assert.Contains(configured.Tcp.PortRangeStart, targets);
            Assert.True(configured.Policy.Port <= 0 || targets.Contains(configured.Policy.Port), "the policy port is on: its Service port too");
        }

        // The monitoring listener: only ClusterIP Services forward to it, and one does, for Prometheus.
        List<YamlMappingNode> toMonitoring = [.. heraldServices.Where(s => Sequence(s, "spec", "ports").Cast<YamlMappingNode>().Any(p => TargetPort(container, p) == monitoring))];
        YamlMappingNode monitoringService = Assert.Single(toMonitoring);
        Assert.Equal("ClusterIP", ServiceType(monitoringService));
        Assert.Equal("herald-monitoring", Scalar(monitoringService, "metadata", "name"));

        // Prometheus finds it: the pod annotations, and the ServiceMonitor (Prometheus Operator) selects that Service alone.
        YamlMappingNode annotations = Mapping(herald, "spec", "template", "metadata", "annotations");
        Assert.Equal("true", Scalar(annotations, "prometheus.io/scrape"));
        Assert.Equal(monitoring.ToString(CultureInfo.InvariantCulture), Scalar(annotations, "prometheus.io/port"));
        Assert.Equal("/metrics", Scalar(annotations, "prometheus.io/path"));
        YamlMappingNode serviceMonitor = Documents(Path.Combine(Kubernetes, "prometheus-operator", "servicemonitor.yaml")).Single();
        Assert.Equal("ServiceMonitor", Scalar(serviceMonitor, "kind"));
        YamlMappingNode wanted = Mapping(serviceMonitor, "spec", "selector", "matchLabels");
        Assert.Equal([monitoringService], objects.Where(o => Scalar(o, "kind") == "Service" && wanted.Children.All(l => Has(o, "metadata", "labels") && Mapping(o, "metadata", "labels").Children.TryGetValue(l.Key, out YamlNode? v) && v.ToString() == l.Value.ToString())));
        YamlMappingNode endpoint = (YamlMappingNode)Assert.Single(Sequence(serviceMonitor, "spec", "endpoints"));
        Assert.Equal(monitoring, TargetPort(container, Assert.Single(Sequence(monitoringService, "spec", "ports").Cast<YamlMappingNode>(), p => Scalar(p, "name") == Scalar(endpoint, "port"))));
        Assert.Equal("/metrics", Scalar(endpoint, "path"));
    }

    [Fact]
    public void Kubernetes_pod_runs_non_root_on_a_read_only_root_filesystem_without_privileges()
    {
        List<YamlMappingNode> objects = KubernetesObjects();
        HeraldOptions configured = KubernetesOptions(objects);
        YamlMappingNode herald = Object(objects, "Deployment", "herald");
        YamlMappingNode pod = Mapping(herald, "spec", "template", "spec");
        Assert.Equal("false", Scalar(pod, "automountServiceAccountToken"));
        Assert.Equal("true", Scalar(pod, "securityContext", "runAsNonRoot"));
        Assert.NotEqual("0", Scalar(pod, "securityContext", "runAsUser"));
        Assert.False(Has(pod, "hostNetwork") && Scalar(pod, "hostNetwork") == "true", "hostNetwork shares the node's network");

        foreach (YamlMappingNode container in Sequence(pod, "containers").Cast<YamlMappingNode>())
        {
            string name = Scalar(container, "name");
            Assert.Equal("false", Scalar(container, "securityContext", "allowPrivilegeEscalation"));
            Assert.Equal("true", Scalar(container, "securityContext", "readOnlyRootFilesystem"));
            Assert.False(Has(container, "securityContext", "privileged") && Scalar(container, "securityContext", "privileged") == "true", $"{name} is privileged");
            Assert.Contains("ALL", Sequence(container, "securityContext", "capabilities", "drop").Select(c => c.ToString()));

            // A capability added for a non-root process never reaches its effective set (no ambient capabilities
            // on Kubernetes): port 943 is bound through the pod's sysctl instead, so nothing is added.
            Assert.False(Has(container, "securityContext", "capabilities", "add"), $"{name} adds capabilities");

            // The root filesystem is read-only: /tmp (the runtime's diagnostics socket) is an emptyDir.
            YamlMappingNode tmp = Assert.Single(Sequence(container, "volumeMounts").Cast<YamlMappingNode>(), m => Scalar(m, "mountPath") == "/tmp");
            YamlMappingNode volume = Assert.Single(Sequence(pod, "volumes").Cast<YamlMappingNode>(), v => Scalar(v, "name") == Scalar(tmp, "name"));
            Assert.True(Has(volume, "emptyDir"), "/tmp is an emptyDir");
        }

        // Port 943 as non-root: the unprivileged-port sysctl where the policy port is on below 1024, and only there.
        YamlMappingNode? sysctl = Has(pod, "securityContext", "sysctls")
            ? Sequence(pod, "securityContext", "sysctls").Cast<YamlMappingNode>().SingleOrDefault(s => Scalar(s, "name") == "net.ipv4.ip_unprivileged_port_start")
            : null;
        if (configured.Policy.Port is > 0 and < 1024)
        {
            Assert.NotNull(sysctl);
            Assert.True(int.Parse(Scalar(sysctl, "value"), CultureInfo.InvariantCulture) <= configured.Policy.Port, "the sysctl must allow the policy port");
            Assert.Equal(configured.Policy.Port, ContainerPort(Container(herald, "herald"), "policy"));
        }
        else
        {
            Assert.Null(sysctl);
        }
    }

    [Fact]
    public void Kubernetes_PodDisruptionBudget_covers_the_broker_pods_only_and_leaves_some_running()
    {
        List<YamlMappingNode> objects = KubernetesObjects();
        YamlMappingNode herald = Object(objects, "Deployment", "herald");
        YamlMappingNode budget = Object(objects, "PodDisruptionBudget", "herald");
        YamlMappingNode selector = Mapping(budget, "spec", "selector", "matchLabels");
        bool Covers(YamlMappingNode workload) => selector.Children.All(l => Mapping(workload, "spec", "template", "metadata", "labels").Children.TryGetValue(l.Key, out YamlNode? v) && v.ToString() == l.Value.ToString());
        Assert.Equal([herald], objects.Where(o => Scalar(o, "kind") is "Deployment" or "StatefulSet" && Covers(o)));
        int replicas = int.Parse(Scalar(herald, "spec", "replicas"), CultureInfo.InvariantCulture);
        int unavailable = int.Parse(Scalar(budget, "spec", "maxUnavailable"), CultureInfo.InvariantCulture);
        Assert.InRange(unavailable, 1, replicas - 1); // a drain can proceed, and some nodes always serve
    }

    [Fact]
    public async Task Kubernetes_probes_and_grace_period_match_the_configured_drain_of_a_real_broker()
    {
        List<YamlMappingNode> objects = KubernetesObjects();
        HeraldOptions configured = KubernetesOptions(objects);
        YamlMappingNode herald = Object(objects, "Deployment", "herald");
        YamlMappingNode container = Container(herald, "herald");

        // The kubelet kills the pod only after the drain the broker was configured with.
        TimeSpan drain = configured.Monitoring.DrainDelay + configured.Limits.ShutdownDrainTimeout;
        TimeSpan grace = TimeSpan.FromSeconds(int.Parse(Scalar(herald, "spec", "template", "spec", "terminationGracePeriodSeconds"), CultureInfo.InvariantCulture));
        Assert.True(grace > drain, $"terminationGracePeriodSeconds {grace} must exceed DrainDelay + ShutdownDrainTimeout = {drain}");

        // Readiness notices the drain within DrainDelay (while the ports still take clients).
        TimeSpan noticed = TimeSpan.FromSeconds(int.Parse(Scalar(container, "readinessProbe", "periodSeconds"), CultureInfo.InvariantCulture) * int.Parse(Scalar(container, "readinessProbe", "failureThreshold"), CultureInfo.InvariantCulture));
        Assert.True(noticed <= configured.Monitoring.DrainDelay, $"readiness fails within {noticed}, after the {configured.Monitoring.DrainDelay} DrainDelay");

        // Every probe names the monitoring listener's port.
        string[] probes = ["startupProbe", "readinessProbe", "livenessProbe"];
        Assert.All(probes, probe => Assert.Equal(configured.Monitoring.Port, TargetPort(container, Mapping(container, probe, "httpGet"))));

        // A real broker with the ConfigMap's settings (on free loopback ports, a short drain delay) answers each
        // probe's path on its monitoring listener and none on the client HTTP port; while it drains, the
        // readiness path turns 503 and the liveness path stays 200.
        string[] args = [.. ConfigMapData(objects).Select(e => $"--{e.Key.Replace("__", ":", StringComparison.Ordinal)}={e.Value}")];
        await using var broker = await TestBroker.StartAsync(o => o.Monitoring.DrainDelay = TimeSpan.FromSeconds(2), args);
        await using var client = await ProtocolClient.OpenAsync(broker.Port);
        using var monitoring = new HttpClient { BaseAddress = broker.Monitoring.BaseAddress };
        string metrics = Scalar(herald, "spec", "template", "metadata", "annotations", "prometheus.io/path");
        foreach (string path in probes.Select(p => Scalar(container, p, "httpGet", "path")).Append(metrics))
        {
            using HttpResponseMessage answered = await monitoring.GetAsync(path);
            Assert.Equal((path, HttpStatusCode.OK), (path, answered.StatusCode));
            using HttpResponseMessage onClientPort = await broker.Http.GetAsync(path);
            Assert.Equal((path, HttpStatusCode.NotFound), (path, onClientPort.StatusCode));
        }

        Task stopping = broker.StopAsync();
        string readiness = Scalar(container, "readinessProbe", "httpGet", "path");
        HttpResponseMessage ready = await Until.Value(
            () => monitoring.GetAsync(readiness),
            response =>
            {
                bool done = response.StatusCode != HttpStatusCode.OK || stopping.IsCompleted;
                if (!done)
                {
                    response.Dispose(); // still ready: asked again
                }

                return done;
            },
            $"{readiness} stops answering 200 (or the stop completes)");

        using HttpResponseMessage alive = await monitoring.GetAsync(Scalar(container, "livenessProbe", "httpGet", "path"));
        Assert.Equal(HttpStatusCode.ServiceUnavailable, ready.StatusCode);
        Assert.False(stopping.IsCompleted, "still draining while readiness failed and liveness was asked");
        Assert.Equal(HttpStatusCode.OK, alive.StatusCode);
        ready.Dispose();
        await client.ExpectClosedWithAsync(ErrorCode.ShuttingDown);
        await stopping;
    }

    [Fact]
    public void Compose_publishes_monitoring_on_loopback_only_and_waits_for_the_drain()
    {
        YamlMappingNode herald = Mapping(ComposeFile(Path.Combine(Deploy, "docker-compose.yml")), "services", "herald");
        List<string> ports = [.. Sequence(herald, "ports").Select(p => ComposeDefaults().Replace(p.ToString(), "${default}"))];
        HeraldOptions configured = Options(Mapping(herald, "environment").Children.Select(e => KeyValuePair.Create(e.Key.ToString(), e.Value.ToString())));
        string monitoring = configured.Monitoring.Port.ToString(CultureInfo.InvariantCulture);
        string published = Assert.Single(ports, p => p.EndsWith($":{monitoring}", StringComparison.Ordinal));
        Assert.Matches($@"^(127\.0\.0\.1|\[::1\]):\d+:{monitoring}$", published);
        Assert.All(ports.Where(p => p != published), p => Assert.DoesNotContain(monitoring, p, StringComparison.Ordinal));

        Match grace = Regex.Match(Scalar(herald, "stop_grace_period"), @"^(\d+)s$");
        Assert.True(grace.Success);
        TimeSpan drain = configured.Monitoring.DrainDelay + configured.Limits.ShutdownDrainTimeout;
        Assert.True(TimeSpan.FromSeconds(int.Parse(grace.Groups[1].Value, CultureInfo.InvariantCulture)) > drain, $"stop_grace_period must exceed {drain}");
    }

    [Fact]
    public void The_image_runs_non_root_and_keeps_monitoring_on_its_loopback()
    {
        string[] lines = File.ReadAllLines(Path.Combine(OperationsDeployTests.RepositoryRoot(), "Dockerfile"));
        int runtime = Array.FindLastIndex(lines, l => l.StartsWith("FROM ", StringComparison.Ordinal));
        string[] stage = lines[runtime..];
        string user = Assert.Single(stage, l => l.StartsWith("USER ", StringComparison.Ordinal));
        Assert.DoesNotMatch(@"^USER\s+(0|root)\b", user);
        string[] exposed = [.. stage.Where(l => l.StartsWith("EXPOSE ", StringComparison.Ordinal)).SelectMany(l => l[7..].Split(' ', StringSplitOptions.RemoveEmptyEntries))];
        Assert.NotEmpty(exposed);
        Assert.DoesNotContain(new HeraldOptions().Monitoring.Port.ToString(CultureInfo.InvariantCulture), exposed);
        Assert.DoesNotContain(stage, l => l.Contains("Herald__Monitoring__Host", StringComparison.Ordinal));
    }

    [Fact]
    public void The_cluster_compose_runs_three_nodes_on_one_password_protected_Redis_behind_HAProxy()
    {
        YamlMappingNode services = Mapping(ComposeFile(Path.Combine(Cluster, "docker-compose.yml")), "services");
        var nodes = services.Children
            .Where(s => Has((YamlMappingNode)s.Value, "build"))
            .ToDictionary(s => s.Key.ToString(), s => (YamlMappingNode)s.Value, StringComparer.Ordinal);
        Assert.Equal(3, nodes.Count);

        // One Redis: its service name in every node's Herald__Cluster__Redis, with the password Redis requires.
        YamlMappingNode redis = Mapping(services, "redis");
        Assert.StartsWith("redis:", Scalar(redis, "image"), StringComparison.Ordinal);
        Assert.False(Has(redis, "ports"), "Redis must not be published on the host");
        List<string> command = Sequence(redis, "command").Select(a => ((YamlScalarNode)a).Value ?? "").ToList();
        string password = command[command.IndexOf("--requirepass") + 1];
        Assert.StartsWith("${", password, StringComparison.Ordinal);
        var names = new HashSet<string>(StringComparer.Ordinal);
        foreach ((string name, YamlMappingNode node) in nodes)
        {
            Assert.Equal("Dockerfile", Scalar(node, "build", "dockerfile"));
            Assert.True(File.Exists(Path.Combine(Cluster, Scalar(node, "build", "context"), "Dockerfile")), $"{name}: build context without a Dockerfile");
            Assert.Equal($"redis:6379,password={password}", Scalar(node, "environment", "Herald__Cluster__Redis"));
            Assert.True(names.Add(Scalar(node, "environment", "Herald__ServerName")), $"{name}: server names should differ");

            // Monitoring on this machine's loopback at most, nothing else published by a node.
            foreach (YamlNode port in Sequence(node, "ports"))
            {
                Assert.Matches(@"^127\.0\.0\.1:\d+:8222$", port.ToString());
            }
        }

        // HAProxy balances each node's TCP port 4502 and HTTP port 8080; Prometheus scrapes each node's 8222.
        string haproxy = File.ReadAllText(Path.Combine(Cluster, "haproxy.cfg"));
        Assert.Contains(Sequence(services, "haproxy", "volumes"), v => v.ToString().StartsWith("./haproxy.cfg:", StringComparison.Ordinal));
        Assert.Matches(@"(?m)^\s*bind :4502$", haproxy);
        Assert.Matches(@"(?m)^\s*bind :8080$", haproxy);
        Assert.Matches(@"(?m)^\s*stick on path,field\(4,/\)$", haproxy);
        string prometheus = File.ReadAllText(Path.Combine(Cluster, "prometheus.yml"));
        foreach (string name in nodes.Keys)
        {
            Assert.Matches($@"(?m)^\s*server {name} {name}:4502 ", haproxy);
            Assert.Equal(2, Regex.Count(haproxy, $@"(?m)^\s*server {name} {name}:8080 id "));
            Assert.Contains($"\"{name}:8222\"", prometheus, StringComparison.Ordinal);
        }
    }

    [Fact]
    public void The_shard_deploy_files_give_every_node_the_same_two_shards_in_order_and_the_broker_accepts_them()
    {
        // Compose: the override empties Herald__Cluster__Redis on each node of the cluster file and lists the two Redis services.
        YamlMappingNode baseServices = Mapping(ComposeFile(Path.Combine(Cluster, "docker-compose.yml")), "services");
        YamlMappingNode services = Mapping(ComposeFile(Path.Combine(Cluster, "docker-compose.shards.yml")), "services");
        Assert.Equal("docker-compose.yml", Scalar(services, "redis-2", "extends", "file"));
        Assert.Equal("redis", Scalar(services, "redis-2", "extends", "service"));
        string single = Scalar(baseServices, "herald-1", "environment", "Herald__Cluster__Redis");
        foreach (string node in new[] { "herald-1", "herald-2", "herald-3" })
        {
            var environment = Mapping(baseServices, node, "environment").Children.Concat(Mapping(services, node, "environment").Children)
                .GroupBy(e => e.Key.ToString()).ToDictionary(g => g.Key, g => g.Last().Value.ToString(), StringComparer.Ordinal);
            Assert.Equal("", environment["Herald__Cluster__Redis"]);
            Assert.Equal(single, environment["Herald__Cluster__Shards__0__Redis"]);
            Assert.Equal(single.Replace("redis:6379", "redis-2:6379", StringComparison.Ordinal), environment["Herald__Cluster__Shards__1__Redis"]);
            AssertAccepted(environment.Where(e => e.Key.StartsWith("Herald__Cluster__", StringComparison.Ordinal)));
        }

        // Kubernetes: the kustomization over the base patches the Deployment's env; the password comes before the shards that expand it.
        string overlay = Path.Combine(Deploy, "kubernetes-shards");
        Assert.Equal(["../kubernetes", "redis-shards.yaml"], Sequence(Documents(Path.Combine(overlay, "kustomization.yaml")).Single(), "resources").Select(r => r.ToString()));
        List<YamlMappingNode> env = Sequence(Container(Documents(Path.Combine(overlay, "herald-shards.yaml")).Single(), "herald"), "env").Cast<YamlMappingNode>().ToList();
        Assert.Equal(["HERALD_REDIS_PASSWORD", "Herald__Cluster__Redis", "Herald__Cluster__Shards__0__Redis", "Herald__Cluster__Shards__1__Redis"], env.Select(e => Scalar(e, "name")));
        Assert.Equal("delete", Scalar(env[1], "$patch"));
        for (int i = 0; i < 2; i++)
        {
            Assert.Equal($"herald-redis-{i}.herald-redis-shards:6379,password=$(HERALD_REDIS_PASSWORD)", Scalar(env[2 + i], "value"));
        }

        AssertAccepted(env.Skip(2).Select(e => KeyValuePair.Create(Scalar(e, "name"), Scalar(e, "value"))));
        List<YamlMappingNode> redis = Documents(Path.Combine(overlay, "redis-shards.yaml"));
        YamlMappingNode shards = Object(redis, "StatefulSet", "herald-redis");
        Assert.Equal("2", Scalar(shards, "spec", "replicas"));
        Assert.Equal("herald-redis-shards", Scalar(shards, "spec", "serviceName"));
        Assert.Equal("None", Scalar(Object(redis, "Service", "herald-redis-shards"), "spec", "clusterIP"));

        static void AssertAccepted(IEnumerable<KeyValuePair<string, string>> environment)
        {
            HeraldOptions options = Options(environment);
            Assert.Equal(2, options.Cluster.ShardList.Count);
            ValidateOptionsResult result = new HeraldOptionsValidator().Validate(null, options);
            Assert.True(result.Succeeded, result.FailureMessage);
        }
    }

    [Theory]
    [InlineData("docker-compose.yml")]
    [InlineData("cluster/docker-compose.yml")]
    public void Every_file_a_compose_file_mounts_or_builds_from_exists(string file)
    {
        string path = Path.Combine(Deploy, file);
        string directory = Path.GetDirectoryName(path)!;
        foreach ((YamlNode name, YamlNode service) in Mapping(ComposeFile(path), "services").Children)
        {
            if (Has((YamlMappingNode)service, "build"))
            {
                Assert.True(File.Exists(Path.Combine(directory, Scalar(service, "build", "context"), Scalar(service, "build", "dockerfile"))), $"{file} {name}: no Dockerfile");
            }

            if (Has((YamlMappingNode)service, "volumes"))
            {
                foreach (YamlNode volume in Sequence(service, "volumes"))
                {
                    string source = volume.ToString().Split(':')[0];
                    Assert.True(File.Exists(Path.Combine(directory, source)) || Directory.Exists(Path.Combine(directory, source)), $"{file} {name}: {source} does not exist");
                }
            }
        }
    }

    /// <summary>The ConfigMap's entries (environment variables of the broker).</summary>
    private static IEnumerable<KeyValuePair<string, string>> ConfigMapData(List<YamlMappingNode> objects) =>
        Mapping(Object(objects, "ConfigMap", "herald"), "data").Children.Select(e => KeyValuePair.Create(e.Key.ToString(), e.Value.ToString()));

    /// <summary>The options the Deployment's broker runs with: the ConfigMap and the literal <c>env</c> values.</summary>
    private static HeraldOptions KubernetesOptions(List<YamlMappingNode> objects)
    {
        YamlMappingNode container = Container(Object(objects, "Deployment", "herald"), "herald");
        IEnumerable<KeyValuePair<string, string>> env = Sequence(container, "env").Cast<YamlMappingNode>()
            .Where(e => Has(e, "value"))
            .Select(e => KeyValuePair.Create(Scalar(e, "name"), Scalar(e, "value")));
        return Options(ConfigMapData(objects).Concat(env));
    }

    /// <summary>Environment variables bound as the broker binds them; a <c>Herald__</c> key that names no option fails.</summary>
    private static HeraldOptions Options(IEnumerable<KeyValuePair<string, string>> environment)
    {
        IConfigurationRoot configuration = new ConfigurationBuilder()
            .AddInMemoryCollection(environment.Select(e => KeyValuePair.Create(e.Key.Replace("__", ":", StringComparison.Ordinal), (string?)e.Value)))
            .Build();
        return configuration.GetSection(HeraldOptions.Section).Get<HeraldOptions>(binder => binder.ErrorOnUnknownConfiguration = true) ?? new HeraldOptions();
    }

    private static string ServiceType(YamlMappingNode service) => Has(service, "spec", "type") ? Scalar(service, "spec", "type") : "ClusterIP";

    private static int ContainerPort(YamlMappingNode container, string name) =>
        int.Parse(Scalar(Assert.Single(Sequence(container, "ports").Cast<YamlMappingNode>(), p => Has(p, "name") && Scalar(p, "name") == name), "containerPort"), CultureInfo.InvariantCulture);

    /// <summary>The container port a Service port (<c>targetPort</c>, else <c>port</c>) or a probe (<c>port</c>) reaches: a number, or a named container port.</summary>
    private static int TargetPort(YamlMappingNode container, YamlMappingNode port)
    {
        string target = Has(port, "targetPort") ? Scalar(port, "targetPort") : Scalar(port, "port");
        return int.TryParse(target, NumberStyles.None, CultureInfo.InvariantCulture, out int number) ? number : ContainerPort(container, target);
    }

    private static IEnumerable<string> Resources() =>
        Sequence(Documents(Path.Combine(Kubernetes, "kustomization.yaml")).Single(), "resources").Select(r => r.ToString());

    private static List<YamlMappingNode> KubernetesObjects() =>
        [.. Resources().SelectMany(file => Documents(Path.Combine(Kubernetes, file)))];

    private static YamlMappingNode ComposeFile(string path) => Documents(path).Single();

    /// <summary>Every document of a YAML file, merge keys (<c>&lt;&lt;: *anchor</c>) applied as Compose applies them.</summary>
    private static List<YamlMappingNode> Documents(string path)
    {
        using var reader = new StreamReader(path);
        var stream = new YamlStream();
        stream.Load(reader);
        return [.. stream.Documents.Select(d => (YamlMappingNode)Merged(d.RootNode))];
    }

    /// <summary>
    /// A copy with each <c>&lt;&lt;</c> key replaced by the entries of the mapping(s) it names, the mapping's
    /// own keys winning (YAML's merge key; YamlDotNet's <c>MergingParser</c> keeps both and fails on them).
    /// </summary>
    private static YamlNode Merged(YamlNode node)
    {
        switch (node)
        {
            case YamlMappingNode map:
                var merged = new YamlMappingNode();
                if (map.Children.TryGetValue("<<", out YamlNode? bases))
                {
                    foreach (YamlNode source in bases is YamlSequenceNode list ? list.Children : [bases])
                    {
                        foreach ((YamlNode key, YamlNode value) in ((YamlMappingNode)Merged(source)).Children)
                        {
                            merged.Children[key] = value;
                        }
                    }
                }

                foreach ((YamlNode key, YamlNode value) in map.Children.Where(entry => entry.Key.ToString() != "<<"))
                {
                    merged.Children[key] = Merged(value);
                }

                return merged;
            case YamlSequenceNode sequence:
                return new YamlSequenceNode(sequence.Children.Select(Merged));
            default:
                return node;
        }
    }

    private static YamlMappingNode Object(List<YamlMappingNode> objects, string kind, string name) =>
        Assert.Single(objects, o => Scalar(o, "kind") == kind && Scalar(o, "metadata", "name") == name);

    private static YamlMappingNode Container(YamlMappingNode deployment, string name) =>
        Assert.Single(Sequence(deployment, "spec", "template", "spec", "containers").Cast<YamlMappingNode>(), c => Scalar(c, "name") == name);

    private static (string Secret, string Key) SecretKey(YamlMappingNode env) =>
        (Scalar(env, "valueFrom", "secretKeyRef", "name"), Scalar(env, "valueFrom", "secretKeyRef", "key"));

    private static (string Path, string Port) Probe(YamlMappingNode container, string probe) =>
        (Scalar(container, probe, "httpGet", "path"), Scalar(container, probe, "httpGet", "port"));

    /// <summary>Whether a Service's selector matches pods with these labels.</summary>
    private static bool Selects(YamlMappingNode service, YamlMappingNode labels) =>
        Mapping(service, "spec", "selector").Children.All(s => labels.Children.TryGetValue(s.Key, out YamlNode? v) && v.ToString() == s.Value.ToString());

    private static YamlNode Node(YamlNode node, params string[] path)
    {
        foreach (string key in path)
        {
            Assert.True(node is YamlMappingNode map && map.Children.ContainsKey(key), $"no '{key}' (path {string.Join('.', path)}) at line {node.Start.Line}");
            node = ((YamlMappingNode)node)[key];
        }

        return node;
    }

    private static bool Has(YamlMappingNode node, params string[] path)
    {
        YamlNode current = node;
        foreach (string key in path)
        {
            if (current is not YamlMappingNode map || !map.Children.TryGetValue(key, out YamlNode? next))
            {
                return false;
            }

            current = next;
        }

        return true;
    }

    private static string Scalar(YamlNode node, params string[] path) => ((YamlScalarNode)Node(node, path)).Value ?? "";

    private static YamlMappingNode Mapping(YamlNode node, params string[] path) => (YamlMappingNode)Node(node, path);

    private static YamlSequenceNode Sequence(YamlNode node, params string[] path) => (YamlSequenceNode)Node(node, path);

    [GeneratedRegex(@"^(?<host>[a-z0-9-]+):(?<port>\d+),password=\$\((?<variable>\w+)\)$")]
    private static partial Regex RedisConfiguration();

    /// <summary>Compose's <c>${NAME:-default}</c>, resolved as with the variable unset.</summary>
    [GeneratedRegex(@"\$\{\w+:-(?<default>[^}]*)\}")]
    private static partial Regex ComposeDefaults();
}
