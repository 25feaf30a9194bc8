using System.Diagnostics;
using System.IO.Compression;
using System.Reflection.Metadata;
using System.Text.Json;
using System.Xml.Linq;

namespace Herald.Client.Tests.Packaging;

/// <summary>
/// Packs Herald.Protocol and Herald.Client from this repository (<c>dotnet pack -c Release</c>, as a release would,
/// with a repository URL given) into a temporary folder once, and reads what a .NET shop's feed would get: the
/// .nupkg's nuspec and files, the .snupkg's PDBs and their source link.
/// </summary>
public sealed class PackageTests(PackageTests.Packed packed) : IClassFixture<PackageTests.Packed>
{
    private const string RepositoryUrl = "https://github.com/example/herald";

    /// <summary>The SourceLink custom debug information (Portable PDB spec).</summary>
    private static readonly Guid SourceLinkKind = new("CC110556-A091-4D38-9FEC-25AB9A351A6A");

    private static readonly XNamespace Nuspec = "http://schemas.microsoft.com/packaging/2013/05/nuspec.xsd";

    [Theory]
    [InlineData("Herald.Protocol")]
    [InlineData("Herald.Client")]
    public void The_package_names_its_licence_readme_and_repository(string id)
    {
        XElement metadata = packed.Metadata(id);

        XElement license = metadata.Element(Nuspec + "license")!;
        Assert.Equal(("expression", "MIT"), ((string?)license.Attribute("type"), license.Value));
        Assert.Equal("README.md", (string?)metadata.Element(Nuspec + "readme"));
        Assert.Contains($"# {id}", packed.ReadText(id, "README.md"), StringComparison.Ordinal);
        XElement repository = metadata.Element(Nuspec + "repository")!;
        Assert.Equal(("git", RepositoryUrl, packed.Commit), ((string?)repository.Attribute("type"), (string?)repository.Attribute("url"), (string?)repository.Attribute("commit")));
    }

    [Theory]
    [InlineData("Herald.Protocol")]
    [InlineData("Herald.Client")]
    public void The_package_carries_a_net10_0_and_a_netstandard2_0_build_and_only_its_own_dependencies(string id)
    {
        XElement metadata = packed.Metadata(id);

        Assert.Contains($"lib/net10.0/{id}.dll", packed.Entries(id));
        Assert.Contains($"lib/netstandard2.0/{id}.dll", packed.Entries(id));
        Dictionary<string, string[]> groups = metadata.Element(Nuspec + "dependencies")!.Elements(Nuspec + "group").ToDictionary(
            g => (string)g.Attribute("targetFramework")!,
            g => g.Elements(Nuspec + "dependency").Select(d => (string)d.Attribute("id")!).Order(StringComparer.Ordinal).ToArray());
        Assert.Equal(["net10.0", ".NETStandard2.0"], groups.Keys);
        Assert.All(groups.Values, dependencies => Assert.DoesNotContain("Microsoft.NET.StringTools", dependencies));
        Assert.All(groups.Values, dependencies => Assert.Contains("MessagePack", dependencies));
        // netstandard2.0 brings what .NET Framework lacks; net10.0 has it in the box.
        Assert.Contains("System.Memory", groups[".NETStandard2.0"]);
        Assert.DoesNotContain("System.Memory", groups["net10.0"]);
        if (id == "Herald.Client")
        {
            Assert.All(groups.Values, dependencies => Assert.Contains("Herald.Protocol", dependencies));
            Assert.Contains("Microsoft.Bcl.AsyncInterfaces", groups[".NETStandard2.0"]);
        }
    }

    [Theory]
    [InlineData("Herald.Protocol", "net10.0")]
    [InlineData("Herald.Protocol", "netstandard2.0")]
    [InlineData("Herald.Client", "net10.0")]
    [InlineData("Herald.Client", "netstandard2.0")]
    public void The_symbol_package_holds_a_deterministic_pdb_that_links_its_sources_to_the_repository_at_the_packed_commit(string id, string framework)
    {
        using MetadataReaderProvider pdb = MetadataReaderProvider.FromPortablePdbStream(new MemoryStream(packed.ReadSymbols(id, $"lib/{framework}/{id}.pdb")));
        MetadataReader reader = pdb.GetMetadataReader();

        string? sourceLink = null;
        foreach (CustomDebugInformationHandle handle in reader.GetCustomDebugInformation(EntityHandle.ModuleDefinition))
        {
            CustomDebugInformation information = reader.GetCustomDebugInformation(handle);
            if (reader.GetGuid(information.Kind) == SourceLinkKind)
            {
                sourceLink = System.Text.Encoding.UTF8.GetString(reader.GetBlobBytes(information.Value));
            }
        }

        Assert.NotNull(sourceLink);
        string target = Assert.Single(JsonDocument.Parse(sourceLink).RootElement.GetProperty("documents").EnumerateObject()).Value.GetString()!;
        Assert.Equal($"https://raw.githubusercontent.com/example/herald/{packed.Commit}/*", target);
        // A continuous-integration build maps the clone's folder to /_/: no path of this machine's clone is left.
        string[] documents = [.. reader.Documents.Select(d => reader.GetString(reader.GetDocument(d).Name))];
        Assert.Contains(id == "Herald.Client" ? "/_/clients/dotnet/src/Herald.Client/HeraldClient.cs" : "/_/broker/src/Herald.Protocol/FrameReader.cs", documents);
        Assert.DoesNotContain(documents, d => d.StartsWith(packed.Root, StringComparison.Ordinal));
    }

    /// <summary>The two packages, packed once for the class.</summary>
    public sealed class Packed : IDisposable
    {
        private readonly string _folder = Directory.CreateTempSubdirectory("herald-packages-").FullName;

        public Packed()
        {
            string root = Root = RepositoryRoot();
            Commit = Run(root, "git", "rev-parse", "HEAD").Trim();
            foreach (string project in new[] { "broker/src/Herald.Protocol", "clients/dotnet/src/Herald.Client" })
            {
                // --no-restore: the test build restored these projects already; restoring again would rewrite their
                // obj/ assets while other test assemblies (the herald CLI's pack among them) read them.
                Run(root, Environment.GetEnvironmentVariable("DOTNET_HOST_PATH") ?? "dotnet",
                    "pack", project, "-c", "Release", "--no-restore", "-o", _folder, "-p:ContinuousIntegrationBuild=true", $"-p:HeraldRepositoryUrl={RepositoryUrl}");
            }
        }

        public string Commit { get; }

        /// <summary>The clone the packages were packed from.</summary>
        public string Root { get; }

        public XElement Metadata(string id) =>
            XDocument.Load(new MemoryStream(Read(Package(id, "nupkg"), $"{id}.nuspec"))).Root!.Element(Nuspec + "metadata")!;

        public string[] Entries(string id)
        {
            using ZipArchive zip = ZipFile.OpenRead(Package(id, "nupkg"));
            return [.. zip.Entries.Select(e => e.FullName)];
        }

        public string ReadText(string id, string entry) => System.Text.Encoding.UTF8.GetString(Read(Package(id, "nupkg"), entry));

        public byte[] ReadSymbols(string id, string entry) => Read(Package(id, "snupkg"), entry);

        public void Dispose() => Directory.Delete(_folder, recursive: true);

        private string Package(string id, string extension) =>
            Assert.Single(Directory.GetFiles(_folder, $"{id}.*.{extension}"), f => Path.GetFileName(f).StartsWith(id + ".", StringComparison.Ordinal) && char.IsDigit(Path.GetFileName(f)[id.Length + 1]));

        private static byte[] Read(string package, string entry)
        {
            using ZipArchive zip = ZipFile.OpenRead(package);
            using Stream stream = (zip.GetEntry(entry) ?? throw new InvalidOperationException($"{Path.GetFileName(package)} has no {entry}")).Open();
            using var copy = new MemoryStream();
            stream.CopyTo(copy);
            return copy.ToArray();
        }

        private static string RepositoryRoot()
        {
            string? folder = AppContext.BaseDirectory;
            while (folder is not null && !File.Exists(Path.Combine(folder, "broker.sln")))
            {
                folder = Path.GetDirectoryName(folder);
            }

            return folder ?? throw new InvalidOperationException("broker.sln not found above the test assembly");
        }

        /// <summary>Runs a command to its end (bounded: a pack builds both projects in Release); its stdout, or its output in the failure.</summary>
        private static string Run(string workingDirectory, string file, params string[] args)
        {
            var start = new ProcessStartInfo(file) { WorkingDirectory = workingDirectory, RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
            foreach (string arg in args)
            {
                start.ArgumentList.Add(arg);
            }

            using Process process = Process.Start(start)!;
            Task<string> stdout = process.StandardOutput.ReadToEndAsync();
            Task<string> stderr = process.StandardError.ReadToEndAsync();
            if (!process.WaitForExit(TimeSpan.FromMinutes(10)))
            {
                process.Kill(entireProcessTree: true);
                throw new TimeoutException($"{file} {string.Join(' ', args)} did not finish within 10 minutes");
            }

            string output = stdout.Result;
            return process.ExitCode == 0 ? output : throw new InvalidOperationException($"{file} {string.Join(' ', args)} exited {process.ExitCode}:\n{output}\n{stderr.Result}");
        }
    }
}
