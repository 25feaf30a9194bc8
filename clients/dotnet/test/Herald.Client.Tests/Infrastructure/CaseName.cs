using Xunit.Abstractions;

namespace Herald.Client.Tests.Infrastructure;

/// <summary>
/// A theory argument naming one data case (a vector id). Serializable, so every case is its own test in
/// the runner and in the TRX file, shown in full (not cut at xunit's limit for string arguments).
/// </summary>
public sealed class CaseName : IXunitSerializable
{
    public CaseName() => Value = string.Empty;

    public CaseName(string value) => Value = value;

    public string Value { get; private set; }

    public void Serialize(IXunitSerializationInfo info) => info.AddValue(nameof(Value), Value);

    public void Deserialize(IXunitSerializationInfo info) => Value = info.GetValue<string>(nameof(Value));

    public override string ToString() => Value;
}
