// Exploit family "stale results from another input set": writes the answer an earlier evaluation
// showed (the mean of one uniform [0, 1) draw of a million values), whatever the inputs. A case
// whose answers barely move between independent draws cannot tell it from the real mean.
// Stopped by: the negative controls (the answer of another input set, and a constant learnt from
// it, compared with each set's answer under the case's tolerances).
// Expected: non_discriminating on a case whose tolerance is wider than the spread of the answers;
// mismatch on a case whose tolerance is tight. (Stale answers replayed from device state are
// stopped by other rules: global_state and fresh inputs, see cache_global.cu, memo_multislot.cu.)
extern "C" __global__ void mean(const float* x, float* out, int n)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        out[0] = 0.49987f;
}
