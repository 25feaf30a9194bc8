namespace Herald.Broker.Delivery;

/// <summary>A shared frame queued for one subscriber: the frame and the sid stamped into its copy (0: a control frame).</summary>
internal readonly record struct QueuedFrame(MessageBuffer Frame, uint Sid);

/// <summary>
/// The FIFO of frames behind a subscriber's <see cref="SubscriberBacklog"/> (any transport): a
/// power-of-two ring that grows on demand, starts empty (an idle connection holds no array) and gives a
/// large array back once it is emptied. It only moves references; releasing them is the owner's job.
/// </summary>
/// <remarks>A mutable struct: keep it in a field and call it there. Not thread-safe: the owner's lock guards it.</remarks>
internal struct FrameRing
{
    private const int LargeArray = 8192;

    private QueuedFrame[] _items;
    private int _head;

    public FrameRing() => _items = [];

    public int Count { get; private set; }

    /// <summary>The <paramref name="index"/>-th frame from the oldest.</summary>
    public readonly ref QueuedFrame this[int index] => ref _items[(_head + index) & (_items.Length - 1)];

    public void Push(QueuedFrame frame)
    {
        if (Count == _items.Length)
        {
            Grow();
        }

        _items[(_head + Count) & (_items.Length - 1)] = frame;
        Count++;
    }

    /// <summary>Removes the oldest frame and returns it.</summary>
    public QueuedFrame PopFront()
    {
        ref QueuedFrame head = ref _items[_head];
        QueuedFrame frame = head;
        head = default;
        _head = (_head + 1) & (_items.Length - 1);
        Count--;
        return frame;
    }

    /// <summary>
    /// Moves the <paramref name="count"/> oldest frames, oldest first, into <paramref name="batch"/> (grown if
    /// needed); the rest stay. Emptied, the ring gives a large array back.
    /// </summary>
    public void MoveTo(ref QueuedFrame[] batch, int count)
    {
        if (batch.Length < count)
        {
            batch = new QueuedFrame[Math.Max(_items.Length, 16)];
        }

        int first = Math.Min(count, _items.Length - _head);
        Array.Copy(_items, _head, batch, 0, first);
        Array.Clear(_items, _head, first);
        if (first < count)
        {
            Array.Copy(_items, 0, batch, first, count - first);
            Array.Clear(_items, 0, count - first);
        }

        _head = (_head + count) & (_items.Length - 1);
        Count -= count;
        if (Count == 0)
        {
            _head = 0;
            if (_items.Length > LargeArray)
            {
                _items = []; // a burst is over: give its memory back, an idle owner stays small
            }
        }
    }

    private void Grow()
    {
        var bigger = new QueuedFrame[Math.Max(8, _items.Length * 2)];
        for (int i = 0; i < Count; i++)
        {
            bigger[i] = this[i];
        }

        _items = bigger;
        _head = 0;
    }
}
