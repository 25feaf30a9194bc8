using BenchmarkDotNet.Running;
using Herald.Benchmarks.Codec;

// Micro-benchmarks of the protocol codec and the topic router (in memory, no sockets; end-to-end numbers come from loadtest/).
//   dotnet run -c Release --project broker/bench/Herald.Benchmarks -- --filter '*'
//   dotnet run -c Release --project broker/bench/Herald.Benchmarks -- --filter '*Decode*' --job short
//   dotnet run -c Release --project broker/bench/Herald.Benchmarks -- --filter '*TopicRouter*' --job short
//   dotnet run -c Release --project broker/bench/Herald.Benchmarks -- --filter '*Permission*' --job short
//   dotnet run -c Release --project broker/bench/Herald.Benchmarks -- --filter '*PublicationPath*' --job short
// (Not typeof(Program): Herald.Broker exposes its own Program to the test host.)
BenchmarkSwitcher.FromAssembly(typeof(PublishDecodeBenchmarks).Assembly).Run(args);
