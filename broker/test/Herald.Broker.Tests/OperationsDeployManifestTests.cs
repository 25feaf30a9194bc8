using System.Text.RegularExpressions;
using YamlDotNet.RepresentationModel;

namespace Herald.Broker.Tests;

/// <summary>
/// The manifests of <c>deploy/</c> read as YAML (no Docker engine or Kubernetes API here): the cluster
/// compose file runs three nodes on one Redis behind HAProxy, the Kubernetes manifests scale past one
/// replica only with a Redis behind them, every file the kustomization or a compose file names exists.
/// What the running stack does (HAProxy's stickiness, the nodes' routing) is checked by hand and by the
/// cluster tests; this keeps the files consistent with each other as they change.
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
}
