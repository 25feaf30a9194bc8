using Xunit.Abstractions;

namespace Herald.Protocol.Tests;

/// <summary>
/// A theory argument naming one data case (a vector id, a topics.json row). Serializable, so every case is
/// its own test; shown through <see cref="ToString"/>, so the name is not cut at xunit's 50-character limit
/// for string arguments.
/// </summary>
public sealed class CaseName : IXunitSerializable
{
    public CaseName() => Value = string.Empty; // for the deserializer

    public CaseName(string value) => Value = value;

    public string Value { get; private set; }

    public void Serialize(IXunitSerializationInfo info) => info.AddValue(nameof(Value), Value);

    public void Deserialize(IXunitSerializationInfo info) => Value = info.GetValue<string>(nameof(Value));

    public override string ToString() => Value;
}
